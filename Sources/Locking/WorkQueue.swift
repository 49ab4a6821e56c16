import Foundation

/// A bounded first-in, first-out queue that worker threads wait on. A
/// waiting worker is woken when work arrives or the queue closes; nothing
/// polls. Once closed, the queue refuses new work and its workers drain what
/// is left, then stop.
public final class WorkQueue<Item: Sendable>: Sendable {
    public enum Refusal: Error, Equatable {
        /// `depthMax` items are waiting.
        case full
        /// `close` was called: the caller must not expect the work to run.
        case closed
    }

    private struct State: Sendable {
        /// Items waiting, from `head` on; the consumed prefix is dropped once
        /// it is the larger part, so a push and a take cost O(1) amortised.
        var items: [Item] = []
        var head = 0
        var closed = false

        var depth: Int { items.count - head }
    }

    public let depthMax: Int
    private let state = Monitor(State())

    /// How long an idle worker sleeps before it looks again by itself. Only
    /// a backstop: work and `close` wake it at once.
    private static var idleWaitSeconds: Int64 { 3_600 }

    public init(depthMax: Int) {
        precondition(depthMax > 0)
        self.depthMax = depthMax
    }

    public var depth: Int {
        state.withLock { $0.depth }
    }

    public var isClosed: Bool {
        state.withLock { $0.closed }
    }

    /// Queues `item`, or says why not.
    public func push(_ item: Item) throws(Refusal) {
        try state.withLock { state throws(Refusal) in
            guard !state.closed else { throw .closed }
            guard state.depth < depthMax else { throw .full }
            state.items.append(item)
        }
        state.signal()
    }

    /// Waits for work and takes up to `countMax` items, oldest first. Returns
    /// an empty array only once the queue is closed and drained.
    public func take(upTo countMax: Int) -> [Item] {
        precondition(countMax > 0)
        while true {
            let taken = take(upTo: countMax, deadline: .now + .seconds(Self.idleWaitSeconds))
            if let taken { return taken }
        }
    }

    /// As `take(upTo:)`, but nil when nothing came by `deadline`.
    public func take(upTo countMax: Int, deadline: ContinuousClock.Instant) -> [Item]? {
        precondition(countMax > 0)
        return state.wait(until: deadline, for: { $0.depth > 0 || $0.closed }) { state, ready -> [Item]? in
            guard ready else { return nil }
            let end = min(state.items.count, state.head + countMax)
            let taken = Array(state.items[state.head..<end])
            state.head = end
            if state.head == state.items.count {
                state.items.removeAll(keepingCapacity: true)
                state.head = 0
            } else if state.head > state.items.count / 2 {
                state.items.removeFirst(state.head)
                state.head = 0
            }
            return taken
        }
    }

    /// Refuses new work from now on and wakes every waiting worker.
    public func close() {
        state.withLock { $0.closed = true }
        state.broadcast()
    }
}

/// Threads that run one body each and can be waited for. Made first and
/// started later, so an owner can start them at the end of its own `init`
/// with a body that uses the owner.
public final class WorkerThreads: Sendable {
    /// Threads started whose body has not yet returned.
    private let running = Monitor(0)

    public init() {}

    public func start(count: Int, name: String, _ body: @escaping @Sendable (_ index: Int) -> Void) {
        running.withLock { $0 += count }
        for index in 0..<count {
            let thread = Thread { [running] in
                Thread.nameCurrent("\(name)-\(index)")
                body(index)
                let last = running.withLock { running in
                    running -= 1
                    return running == 0
                }
                if last { running.broadcast() }
            }
            thread.start()
        }
    }

    /// Waits until every thread has returned, at most `timeoutSeconds`;
    /// false if some had not.
    @discardableResult
    public func wait(timeoutSeconds: Double) -> Bool {
        wait(until: .now + .seconds(max(0, timeoutSeconds)))
    }

    /// Waits until every thread has returned, at most until `deadline`;
    /// false if some had not.
    @discardableResult
    public func wait(until deadline: ContinuousClock.Instant) -> Bool {
        running.wait(until: deadline) { $0 == 0 }
    }
}
