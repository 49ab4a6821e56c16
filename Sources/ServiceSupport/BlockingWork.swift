import Foundation
import Locking

/// A few threads for work that waits on the network (Apple's verifyReceipt)
/// or that anyone may ask for (App Store notifications), so a server thread
/// never does it. The queue is bounded: past it, `submit` refuses and the
/// caller answers 503.
package final class BlockingWork: Sendable {
    private let queue: WorkQueue<@Sendable () -> Void>
    private let threads = WorkerThreads()

    package init(threads count: Int, queueDepthMax: Int, name: String = "wallet-blocking") {
        let queue = WorkQueue<@Sendable () -> Void>(depthMax: queueDepthMax)
        self.queue = queue
        threads.start(count: count, name: name) { _ in
            while let work = queue.take(upTo: 1).first { work() }
        }
    }

    /// Queues `work`; false when the queue is full or stopping.
    package func submit(_ work: @escaping @Sendable () -> Void) -> Bool {
        do {
            try queue.push(work)
            return true
        } catch {
            return false
        }
    }

    /// Refuses new work, lets queued work finish, and waits for the threads,
    /// at most `timeoutSeconds`.
    package func stop(timeoutSeconds: Double) {
        queue.close()
        threads.wait(timeoutSeconds: timeoutSeconds)
    }
}
