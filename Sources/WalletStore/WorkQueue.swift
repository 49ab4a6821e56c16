import Foundation

/// A bounded first-in, first-out queue that worker threads wait on. A
/// waiting worker is woken when work arrives or the queue closes; nothing
/// polls. Once closed, the queue refuses new work and its workers drain what
/// is left, then stop.
///
/// The state is guarded by one `NSCondition` (a pthread mutex and condition
/// variable, which the thread sanitizer understands), hence the unchecked
/// conformance.
public final class WorkQueue<Item: Sendable>: @unchecked Sendable {
    public enum Refusal: Error, Equatable {
        /// `depthMax` items are waiting.
        case full
        /// `close` was called: the caller must not expect the work to run.
        case closed
    }

    public let depthMax: Int
    private let condition = NSCondition()
    /// Items waiting, from `head` on; the consumed prefix is dropped once
    /// it is the larger part, so a push and a take cost O(1) amortised.
    private var items: [Item] = []
    private var head = 0
    private var closed = false

    public init(depthMax: Int) {
        precondition(depthMax > 0)
        self.depthMax = depthMax
    }

    public var depth: Int {
        condition.lock()
        defer { condition.unlock() }
        return items.count - head
    }

    public var isClosed: Bool {
        condition.lock()
        defer { condition.unlock() }
        return closed
    }

    /// Queues `item`, or says why not.
    public func push(_ item: Item) throws(Refusal) {
        condition.lock()
        defer { condition.unlock() }
        guard !closed else { throw .closed }
        guard items.count - head < depthMax else { throw .full }
        items.append(item)
        condition.signal()
    }

    /// Waits for work and takes up to `countMax` items, oldest first. Returns
    /// an empty array only once the queue is closed and drained.
    public func take(upTo countMax: Int) -> [Item] {
        precondition(countMax > 0)
        condition.lock()
        defer { condition.unlock() }
        while items.count == head && !closed {
            condition.wait()
        }
        let end = min(items.count, head + countMax)
        let taken = Array(items[head..<end])
        head = end
        if head == items.count {
            items.removeAll(keepingCapacity: true)
            head = 0
        } else if head > items.count / 2 {
            items.removeFirst(head)
            head = 0
        }
        return taken
    }

    /// Refuses new work from now on and wakes every waiting worker.
    public func close() {
        condition.lock()
        closed = true
        condition.broadcast()
        condition.unlock()
    }
}

/// Threads that run one body each and can be waited for. Made first and
/// started later, so an owner can start them at the end of its own `init`
/// with a body that uses the owner.
public final class WorkerThreads: Sendable {
    private let finished = DispatchGroup()

    public init() {}

    public func start(count: Int, name: String, _ body: @escaping @Sendable (_ index: Int) -> Void) {
        for index in 0..<count {
            finished.enter()
            let thread = Thread { [finished] in
                body(index)
                finished.leave()
            }
            thread.name = "\(name)-\(index)"
            thread.start()
        }
    }

    /// Waits until every thread has returned, at most `timeoutSeconds`;
    /// false if some had not.
    @discardableResult
    public func wait(timeoutSeconds: Double) -> Bool {
        finished.wait(timeout: .now() + timeoutSeconds) == .success
    }
}
