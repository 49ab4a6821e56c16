import Foundation

/// A few threads for work that waits on the network (Apple's verifyReceipt),
/// so a server thread never does. The queue is bounded: past it, `submit`
/// refuses and the caller answers 503.
final class BlockingWork: Sendable {
    private struct State {
        var queue: [@Sendable () -> Void] = []
        var stopping = false
    }

    private let condition = NSCondition()
    nonisolated(unsafe) private var state = State()  // guarded by `condition`
    private let queueDepthMax: Int

    init(threads: Int, queueDepthMax: Int, name: String = "wallet-blocking") {
        self.queueDepthMax = queueDepthMax
        for index in 0..<threads {
            let thread = Thread { [self] in run() }
            thread.name = "\(name)-\(index)"
            thread.start()
        }
    }

    /// Queues `work`; false when the queue is full or stopping.
    func submit(_ work: @escaping @Sendable () -> Void) -> Bool {
        condition.lock()
        defer { condition.unlock() }
        guard !state.stopping, state.queue.count < queueDepthMax else { return false }
        state.queue.append(work)
        condition.signal()
        return true
    }

    /// Lets queued work finish, then stops the threads.
    func stop() {
        condition.lock()
        state.stopping = true
        condition.broadcast()
        condition.unlock()
    }

    private func run() {
        while true {
            condition.lock()
            while state.queue.isEmpty && !state.stopping {
                _ = condition.wait(until: Date(timeIntervalSinceNow: 1))
            }
            if state.queue.isEmpty {
                condition.unlock()
                return
            }
            let work = state.queue.removeFirst()
            condition.unlock()
            work()
        }
    }
}
