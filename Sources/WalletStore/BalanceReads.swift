import Locking
import Postgres
import WalletCore

/// Balance reads, answered in batches by one reader thread: the balances
/// of every user asked for while the previous query ran are read with one
/// query.
///
/// - One query for a batch costs PostgreSQL about what one query for one
///   user costs, so under load a read costs the database a fraction of a
///   round trip, and the server threads wait on none.
/// - A read is answered from a query sent after it arrived, so it sees
///   every write answered before it was asked.
/// - Every read carries `ServerThreadReads.deadline`. The batch runs
///   against its earliest deadline; a read with less than `sendTimeMin` left
///   is answered `database_unavailable` unsent, so one nearly expired read
///   cannot cut a batch's time to nothing.
final class BalanceReads: Sendable {
    typealias Balances = [WalletBalance]
    typealias Completion = @Sendable (Result<Balances, any Error>) -> Void

    private struct Item: Sendable {
        var userID: UserID
        var deadline: ContinuousClock.Instant
        var completion: Completion
    }

    /// Users one query asks for at most.
    static let batchMax = 256
    static let sendTimeMin = Duration.milliseconds(100)

    private let queue: WorkQueue<Item>
    private let thread = WorkerThreads()
    private let reads: ServerThreadReads

    init(reads: ServerThreadReads, queueDepthMax: Int = 4_096) {
        self.reads = reads
        queue = WorkQueue(depthMax: queueDepthMax)
        thread.start(count: 1, name: "wallet-reader") { [self] _ in
            while case let batch = queue.take(upTo: Self.batchMax), !batch.isEmpty {
                answer(batch)
            }
        }
    }

    /// Queues a read. `completion` runs on the reader thread, or at once
    /// with `overloaded` when the queue is full, or `shuttingDown` once
    /// `shutdown` has begun.
    func submit(_ userID: UserID, completion: @escaping Completion) {
        do {
            try queue.push(Item(userID: userID, deadline: .now + ServerThreadReads.deadline, completion: completion))
        } catch .closed {
            completion(.failure(WalletError.shuttingDown))
        } catch {
            completion(.failure(WalletError.overloaded))
        }
    }

    /// Reads waiting for the next query.
    var queueDepth: Int { queue.depth }

    /// Answers what is queued, then stops the reader. Waits at most `timeoutSeconds`.
    func shutdown(timeoutSeconds: Double) {
        queue.close()
        thread.wait(timeoutSeconds: timeoutSeconds)
    }

    private func answer(_ batch: [Item]) {
        let live = answeringExpired(batch, sendTimeMin: Self.sendTimeMin, deadline: \.deadline) {
            $0.completion(.failure(WalletError.databaseUnavailable))
        }
        // Queued in order, so the first has the earliest deadline.
        guard let deadline = live.first?.deadline else { return }
        let userIDs = Array(Set(live.map(\.userID.rawValue)))
        do {
            let rows = try reads.run(deadline: deadline) { try LedgerStore.balances(of: userIDs, on: $0) }
            var byUser: [String: Balances] = [:]
            for row in rows {
                byUser[row.userID, default: []].append(row.walletBalance)
            }
            for item in live { item.completion(.success(byUser[item.userID.rawValue] ?? [])) }
        } catch {
            for item in live { item.completion(.failure(error)) }
        }
    }
}
