import Foundation
import Logging
import Postgres
import Locking
import WalletCore

/// Group commit: credits, debits, grants and hold operations are queued to a small
/// fixed set of database writers and applied in batches, one transaction
/// per batch.
///
/// - A wallet's operations always go to the same writer (a stable hash of
///   the user id), so batches never contend on a wallet row.
/// - A writer takes whatever is queued, up to `batchOperationsMax`, with no
///   timer: an idle writer runs a batch of one at once.
/// - Results are handed back only after COMMIT; every answer is durable.
///   A committed batch's answers are written by a thread of their own, so
///   its writer sends the next batch to the database at once instead of
///   after thirty responses (about a third of a millisecond).
/// - If a batch fails as a whole (a deadlock with another writer on a unique
///   index, or an unexpected error), its operations are retried one at a
///   time, each in its own transaction, to isolate the bad one.
public final class GroupCommit: Sendable {
    public enum Operation: Sendable {
        case credit(LedgerStore.CreditOperation)
        case debit(LedgerStore.DebitOperation)
        /// A hold operation, routed by the user whose wallet it touches
        /// (for an unknown hold, any stable text).
        case hold(LedgerStore.HoldRequest, route: String)
        case grant(GrantOperation)

        /// What picks the writer: the wallet's user.
        var route: String {
            switch self {
            case .credit(let credit): credit.userID.rawValue
            case .debit(let debit): debit.userID.rawValue
            case .hold(_, let route): route
            case .grant(let grant): grant.userID.rawValue
            }
        }
    }

    public enum Outcome: Sendable {
        case credit(LedgerStore.CreditResult)
        case debit(LedgerStore.DebitResult)
        case hold(LedgerStore.HoldResult)
        case grant(GrantResult)
    }

    public typealias Completion = @Sendable (Result<Outcome, any Error>) -> Void

    private struct Item: Sendable {
        var operation: Operation
        var deadline: ContinuousClock.Instant
        var completion: Completion
    }

    /// A committed batch, to be answered.
    private struct Answers: Sendable {
        var items: [Item]
        var outcomes: [Outcome]
    }

    /// One queue per writer thread.
    private let queues: [WorkQueue<Item>]
    private let threads = WorkerThreads()
    /// Committed batches waiting for their answers; when it is full, a
    /// writer answers its batch itself.
    private let answers = WorkQueue<Answers>(depthMax: 64)
    private let answerThread = WorkerThreads()
    private let pool: ConnectionPool
    private let batchOperationsMax: Int
    private let metrics: any StoreMetrics
    private let logger: Logger
    private let clock: any WorkClock

    init(writerCount: Int, batchOperationsMax: Int, queueDepthMax: Int = 4_096,
         pool: ConnectionPool, metrics: any StoreMetrics, logger: Logger, clock: any WorkClock = SystemClock()) {
        self.clock = clock
        precondition(writerCount > 0 && batchOperationsMax > 0)
        queues = (0..<writerCount).map { _ in WorkQueue<Item>(depthMax: queueDepthMax) }
        self.queueDepthMax = queueDepthMax
        self.pool = pool
        self.batchOperationsMax = batchOperationsMax
        self.metrics = metrics
        self.logger = logger
        threads.start(count: writerCount, name: "wallet-writer") { [self] index in
            // A batch is whatever is queued, up to the limit: no timer.
            while case let batch = queues[index].take(upTo: batchOperationsMax), !batch.isEmpty {
                apply(batch)
            }
        }
        answerThread.start(count: 1, name: "wallet-answers") { [self] _ in
            while case let committed = answers.take(upTo: 8), !committed.isEmpty {
                for batch in committed { Self.answer(batch) }
            }
        }
    }

    /// Operations waiting, over all writers.
    public var queueDepth: Int {
        queues.reduce(0) { $0 + $1.depth }
    }

    /// Operations waiting for the busiest writer: a write to a writer whose
    /// queue holds `queueDepthMax` is refused, whatever the others hold.
    public var fullestQueueDepth: Int {
        queues.map(\.depth).max() ?? 0
    }

    /// The bound of one writer's queue.
    public let queueDepthMax: Int

    /// Queues an operation. `completion` runs on a writer thread once the
    /// batch holding it has committed (or failed), or at once with
    /// `WalletError.overloaded` when the writer's queue is full, or with
    /// `WalletError.shuttingDown` when the writers are stopping: such a
    /// request was never queued.
    public func submit(_ operation: Operation, deadline: ContinuousClock.Instant, completion: @escaping Completion) {
        let queue = queues[Int(Self.stableHash(operation.route) % UInt64(queues.count))]
        do {
            try queue.push(Item(operation: operation, deadline: deadline, completion: completion))
        } catch .closed {
            completion(.failure(WalletError.shuttingDown))
        } catch {
            completion(.failure(WalletError.overloaded))
        }
    }

    /// True once `shutdown` has begun: nothing more is queued.
    public var isStopping: Bool {
        queues.contains { $0.isClosed }
    }

    /// Runs what is queued, then stops the writers. Waits at most `timeoutSeconds`.
    func shutdown(timeoutSeconds: Double) {
        let deadline = ContinuousClock.now + .seconds(max(0, timeoutSeconds))
        for queue in queues { queue.close() }
        threads.wait(until: deadline)
        answers.close()
        answerThread.wait(until: deadline)
    }

    private static func answer(_ batch: Answers) {
        for (item, outcome) in zip(batch.items, batch.outcomes) { item.completion(.success(outcome)) }
    }

    /// FNV-1a: stable across runs and processes, unlike `Hasher`.
    static func stableHash(_ text: String) -> UInt64 {
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        for byte in text.utf8 { hash = (hash ^ UInt64(byte)) &* 0x0000_0100_0000_01b3 }
        return hash
    }

    private func apply(_ items: [Item]) {
        var live = answerExpired(items)
        var attempt = 0
        while !live.isEmpty {
            attempt += 1
            do {
                // A whole batch is not re-run on a deadlock: its operations go
                // one at a time instead, which cannot deadlock with each other.
                let committed = Answers(items: live, outcomes: try applyInOneTransaction(live, attemptsMax: 1))
                do {
                    try answers.push(committed)
                } catch {
                    Self.answer(committed)
                }
                return
            } catch let error as PostgresError {
                metrics.countDatabaseError(error)
                let failure = StoreFailure(error)
                switch failure {
                case .notSent:
                    // It never reached the server, or the server refused it
                    // before running it (a restart or a promotion under
                    // way): run it again while there is time.
                    Self.pauseBeforeRetry(attempt, on: clock)
                    live = answerExpired(live)
                    continue
                case .unavailable, .timeout, .outcomeUnknown:
                    let answer = failure.walletError ?? .databaseUnavailable
                    logger.warning("batch failed", ["batch.size": String(live.count), "error": String(reflecting: error)])
                    for item in live { item.completion(.failure(answer)) }
                    return
                case .busy, .conflict, .rejected:
                    // Nothing committed. A locked wallet, a flowNO or key
                    // taken meanwhile, or one bad operation must not fail
                    // the others: one at a time.
                    let expected = failure == .busy || failure == .conflict
                    logger.log(expected ? .debug : .warning, "batch failed; applying its operations one at a time",
                               ["batch.size": String(live.count), "error": String(reflecting: error)])
                }
            } catch {
                logger.warning("batch failed; applying its operations one at a time",
                               ["batch.size": String(live.count), "error": String(reflecting: error)])
            }
            for item in live { item.completion(applyAlone(item)) }
            return
        }
    }

    /// Least time an operation must have left to be sent. A batch runs
    /// against its items' earliest deadline, and a deadline that passes
    /// after sending makes every operation of the batch `outcome_unknown`:
    /// one item queued almost to its end must not cut a batch's time to
    /// nothing. A healthy batch takes tens of milliseconds.
    static let sendTimeMin = Duration.milliseconds(500)

    /// Answers the items whose caller has given up, or has less than
    /// `sendTimeMin` left, without running them, and returns the others.
    private func answerExpired(_ items: [Item]) -> [Item] {
        answeringExpired(items, sendTimeMin: Self.sendTimeMin, deadline: \.deadline) {
            $0.completion(.failure(WalletError.databaseUnavailable))
        }
    }

    /// One operation in its own transaction. When another transaction took
    /// its flowNO or key between read and write, that one has committed by
    /// now, so a second attempt finds it and answers as a replay.
    private func applyAlone(_ item: Item) -> Result<Outcome, any Error> {
        var attempt = 0
        while true {
            attempt += 1
            guard item.deadline > .now + Self.sendTimeMin else { return .failure(WalletError.databaseUnavailable) }
            do {
                return .success(try applyInOneTransaction([item], attemptsMax: nil)[0])
            } catch let error as PostgresError {
                metrics.countDatabaseError(error)
                let failure = StoreFailure(error)
                if failure == .conflict && attempt < Self.aloneAttemptsMax { continue }
                if failure == .notSent {
                    Self.pauseBeforeRetry(attempt, on: clock)
                    continue
                }
                return .failure(failure.walletError ?? error)
            } catch {
                return .failure(error)
            }
        }
    }

    static let aloneAttemptsMax = 3

    /// Before running again work that never reached the server: nothing
    /// the first time (after a restart every pooled connection is dead, the
    /// pool drops them all when it finds one broken, and a second run gets
    /// a fresh one), then 50 ms doubling to a second, while a failover
    /// completes. The callers stop at their items' deadlines.
    static func pauseBeforeRetry(_ attempt: Int, on clock: any WorkClock) {
        guard attempt > 1 else { return }
        let milliseconds = min(50 << min(attempt - 2, 5), 1_000)
        clock.pause(seconds: Double(milliseconds) / 1_000)
    }

    /// One transaction: all credits of the batch, then all debits, so a
    /// wallet topped up and spent in the same batch sees the coins, then
    /// the hold operations in one call (which locks their wallets in key
    /// order, as every call does), then the grants, a call each (they are
    /// rare, and each takes its key's lock before its wallet's).
    private func applyInOneTransaction(_ items: [Item], attemptsMax: Int?) throws -> [Outcome] {
        var credits: [(position: Int, operation: LedgerStore.CreditOperation)] = []
        var debits: [(position: Int, operation: LedgerStore.DebitOperation)] = []
        var holds: [(position: Int, request: LedgerStore.HoldRequest)] = []
        var grants: [(position: Int, operation: GrantOperation)] = []
        for (position, item) in items.enumerated() {
            switch item.operation {
            case .credit(let credit): credits.append((position, credit))
            case .debit(let debit): debits.append((position, debit))
            case .hold(let request, _): holds.append((position, request))
            case .grant(let grant): grants.append((position, grant))
            }
        }
        // Bounded by every item's deadline: no caller waits past its own.
        let deadline = items.map(\.deadline).min()!
        let apply = { (connection: Connection) in
            (credits.isEmpty ? [] : try LedgerStore.credit(credits.map(\.operation), on: connection),
             debits.isEmpty ? [] : try LedgerStore.debit(debits.map(\.operation), on: connection),
             holds.isEmpty ? [] : try LedgerStore.holds(holds.map(\.request), on: connection),
             try grants.map { try LedgerStore.grant($0.operation, on: connection) })
        }
        // One function call is a transaction by itself; BEGIN and COMMIT are
        // sent only when a batch makes more than one call.
        let calls = (credits.isEmpty ? 0 : 1) + (debits.isEmpty ? 0 : 1) + (holds.isEmpty ? 0 : 1) + grants.count
        let (creditResults, debitResults, holdResults, grantResults) = calls == 1
            ? try pool.withSingleStatement(deadline: deadline, attemptsMax: attemptsMax, apply)
            : try pool.withTransaction(deadline: deadline, attemptsMax: attemptsMax, apply)
        if !credits.isEmpty { metrics.observeBatch(operation: .credit, size: credits.count) }
        if !debits.isEmpty { metrics.observeBatch(operation: .debit, size: debits.count) }
        if !holds.isEmpty { metrics.observeBatch(operation: .hold, size: holds.count) }
        if !grants.isEmpty { metrics.observeBatch(operation: .grant, size: grants.count) }
        var outcomes = [Outcome?](repeating: nil, count: items.count)
        for (entry, result) in zip(credits, creditResults) { outcomes[entry.position] = .credit(result) }
        for (entry, result) in zip(debits, debitResults) { outcomes[entry.position] = .debit(result) }
        for (entry, result) in zip(holds, holdResults) { outcomes[entry.position] = .hold(result) }
        for (entry, result) in zip(grants, grantResults) { outcomes[entry.position] = .grant(result) }
        return outcomes.map { $0! }
    }
}

/// Of queued work, answers through `refuse` the items with less than
/// `sendTimeMin` left before their deadline (nothing of theirs was sent, so
/// the answer is `database_unavailable`), and returns the others in order.
func answeringExpired<Item>(_ items: [Item], sendTimeMin: Duration, deadline: KeyPath<Item, ContinuousClock.Instant>,
                            refuse: (Item) -> Void) -> [Item] {
    let cutoff = ContinuousClock.now + sendTimeMin
    var live: [Item] = []
    live.reserveCapacity(items.count)
    for item in items {
        if item[keyPath: deadline] <= cutoff {
            refuse(item)
        } else {
            live.append(item)
        }
    }
    return live
}
