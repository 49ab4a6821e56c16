import Foundation
import Locking
import Testing

@Suite(.timeLimit(.minutes(1)))
struct WorkQueueTests {
    @Test func boundedOrderedAndClosedQueues() throws {
        let queue = WorkQueue<Int>(depthMax: 3)
        for item in 1...3 { try queue.push(item) }
        #expect(throws: WorkQueue<Int>.Refusal.full) { try queue.push(4) }
        #expect(queue.take(upTo: 2) == [1, 2])
        try queue.push(4)
        #expect(queue.depth == 2)
        queue.close()
        #expect(throws: WorkQueue<Int>.Refusal.closed) { try queue.push(5) }
        // Closed, yet what was queued is still handed out, then nothing.
        #expect(queue.take(upTo: 10) == [3, 4])
        #expect(queue.take(upTo: 10) == [])
    }

    /// Eight producers and four consumers: every item is taken exactly once,
    /// and closing wakes the consumers that wait on an empty queue.
    @Test func everyItemIsTakenOnceUnderContention() {
        let queue = WorkQueue<Int>(depthMax: 64)
        let taken = Locked<[Int]>([])
        let consumers = WorkerThreads()
        consumers.start(count: 4, name: "test-consumer") { _ in
            while case let items = queue.take(upTo: 7), !items.isEmpty {
                taken.withLock { $0 += items }
            }
        }
        let producers = WorkerThreads()
        producers.start(count: 8, name: "test-producer") { producer in
            for item in 0..<2_000 {
                // A full queue refuses; the producer tries again, as a caller
                // given 503 would.
                while true {
                    do {
                        try queue.push(producer * 10_000 + item)
                        break
                    } catch {
                        sched_yield()
                    }
                }
            }
        }
        #expect(producers.wait(timeoutSeconds: 30))
        queue.close()
        #expect(consumers.wait(timeoutSeconds: 30))
        let all = taken.withLock { $0 }
        #expect(all.count == 16_000)
        #expect(Set(all) == Set((0..<8).flatMap { producer in (0..<2_000).map { producer * 10_000 + $0 } }))
    }

    /// Each thread runs under its name and index, as `top -H`, a debugger and
    /// a test clock waiting for a worker see it; Linux keeps 15 bytes of it.
    /// Many threads, since a name could be lost to a race at each start.
    @Test func workerThreadsCarryTheirNames() {
        let names = Locked<[Int: String]>([:])
        let threads = WorkerThreads()
        threads.start(count: 64, name: "test-named") { index in
            let name = Thread.current.name ?? ""
            names.withLock { $0[index] = name }
        }
        #expect(threads.wait(timeoutSeconds: 30))
        let seen = names.withLock { $0 }
        #expect(seen == Dictionary(uniqueKeysWithValues: (0..<64).map { ($0, "test-named-\($0)") }))

        let long = WorkerThreads()
        long.start(count: 1, name: "wallet-notifications") { _ in
            let name = Thread.current.name ?? ""
            names.withLock { $0[-1] = name }
        }
        #expect(long.wait(timeoutSeconds: 30))
        #expect(names.withLock { $0[-1] } == "wallet-notifica")
    }
}
