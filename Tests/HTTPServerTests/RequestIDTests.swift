@testable import HTTPServer
import Locking
import Testing
import TestSupport

/// Generated request ids: 16 lowercase hex digits, never the same twice in
/// a process, however many threads ask at once.
@Suite(.timeLimit(.minutes(1)))
struct RequestIDTests {
    @Test func idsFromManyThreadsAreDistinctAndWellFormed() {
        let perThread = 20_000
        let collected = Locked<[[String]]>(Array(repeating: [], count: 8))
        #expect(runOnThreads(8, timeoutSeconds: 50) { index in
            let ids = (0..<perThread).map { _ in RequestID.generate() }
            collected.withLock { $0[index] = ids }
        })
        let all = collected.withLock { $0.flatMap { $0 } }
        #expect(all.count == 8 * perThread)
        #expect(Set(all).count == all.count)
        #expect(all.allSatisfy { $0.utf8.count == 16 && $0.utf8.allSatisfy { (0x30...0x39).contains($0) || (0x61...0x66).contains($0) } })
    }

    @Test func theMixIsABijectionOnTheValuesItIsGiven() {
        // Distinct inputs give distinct outputs (a sample; the mix is built
        // from invertible steps), and consecutive inputs do not give
        // neighbouring outputs.
        let inputs = (0..<100_000).map { UInt64($0) &+ 0xffff_ffff_ffff_0000 }
        let outputs = inputs.map(RequestID.mix)
        #expect(Set(outputs).count == inputs.count)
        #expect(zip(outputs, outputs.dropFirst()).allSatisfy { $0 &- $1 != 1 && $1 &- $0 != 1 })
    }
}
