import Foundation
import Locking
import Logging
import Postgres
import Testing
import TestSupport
@testable import WalletCore
@testable import WalletStore

/// Group commit applies many operations in one transaction; each must get
/// exactly the outcome it would get alone.
@Suite(.timeLimit(.minutes(3)))
struct GroupCommitTests {
    typealias Credit = LedgerStore.CreditOperation
    typealias Debit = LedgerStore.DebitOperation

    func credit(_ flowNo: String, _ user: String, _ product: String = "guodong600", quantity: Int = 1) -> Credit {
        Credit(client: "app", flowNo: FlowNumber(flowNo)!, userID: UserID(user)!, productID: ProductID(product)!,
               quantity: Quantity(quantity)!, claimedAmount: nil, source: .caller, environment: nil)
    }

    func debit(_ key: String, _ user: String, _ amount: Int64, hash: UInt8 = 1) -> Debit {
        Debit(client: "game", key: IdempotencyKey(key)!, requestHash: [hash], userID: UserID(user)!,
              currency: .coin, amount: Amount(amount)!, reason: nil, metadata: nil, requestID: "r-\(key)")
    }

    /// What the operations give in one batch, and what they give one by one
    /// on a second, identical database.
    func batchedAndAlone(credits: [Credit], debits: [Debit])
        throws -> (batched: [String], alone: [String]) {
        func run(_ batched: Bool) throws -> [String] {
            let connection = try Connection(options: try TestDatabase.make())
            try connection.query("SELECT * FROM wallet.grant_coins('u2', 50, 'coin', 'setup', 'tests')")
            var outcomes: [String] = []
            if batched {
                try connection.execute("BEGIN")
                outcomes += try LedgerStore.credit(credits, on: connection).map(describe)
                outcomes += try LedgerStore.debit(debits, on: connection).map(describe)
                try connection.execute("COMMIT")
            } else {
                for credit in credits {
                    outcomes += try LedgerStore.credit([credit], on: connection).map(describe)
                }
                for debit in debits {
                    outcomes += try LedgerStore.debit([debit], on: connection).map(describe)
                }
            }
            let violations = try LedgerStore.checkInvariants(on: connection)
            #expect(violations == [])
            return outcomes
        }
        return (try run(true), try run(false))
    }

    /// A result without its timestamp, which differs between the two databases.
    func describe(_ result: LedgerStore.CreditResult) -> String {
        let credit = result.credit.map { "\($0.currency) \($0.amount) \($0.status) \($0.entryID)" } ?? "-"
        return "\(result.outcome.rawValue) \(credit) \(result.balance.map(String.init) ?? "-")"
            + " \(result.expectedAmount.map(String.init) ?? "-")"
    }

    func describe(_ result: LedgerStore.DebitResult) -> String {
        "\(result.outcome.rawValue) \(result.replayed) \(result.entryID.map(String.init) ?? "-")"
            + " \(result.balance.map(String.init) ?? "-") \(result.requestID ?? "-")"
    }

    @Test func duplicatesInsideOneBatchGetTheOneAtATimeOutcomes() throws {
        let credits = [
            credit("f-1", "u1"),
            credit("f-1", "u1"),                        // replay inside the batch
            credit("f-1", "u9"),                        // the same flowNO for another user
            credit("f-2", "u1", "guodong5000", quantity: 2),
            credit("f-2", "u1", "guodong5000", quantity: 3),  // another quantity
            credit("f-3", "u1", "not-a-product"),
        ]
        let debits = [
            debit("k-1", "u1", 100),
            debit("k-1", "u1", 100),                    // replay inside the batch
            debit("k-1", "u1", 100, hash: 2),           // the same key, another request
            debit("k-2", "u2", 60),                     // more than u2 has
            debit("k-2", "u2", 60),                     // its sticky refusal, replayed
            debit("k-3", "u2", 50),
            debit("k-4", "u2", 1),                      // now empty
        ]
        let (batched, alone) = try batchedAndAlone(credits: credits, debits: debits)
        #expect(batched == alone)
        #expect(batched.map { $0.split(separator: " ").first.map(String.init) ?? "" } == [
            "credited", "replayed", "flow_no_conflict", "credited", "flow_no_conflict", "unknown_product",
            "debited", "debited", "idempotency_key_reused", "insufficient_funds", "insufficient_funds", "debited",
            "insufficient_funds",
        ])
    }

    @Test func aBatchThatFailsAsAWholeIsRetriedOneAtATime() throws {
        let database = try TestDatabase.make()
        let connection = try Connection(options: database)
        // A wallet so full that one more credit overflows BIGINT: its batch
        // fails as a whole. (Entries may be inserted directly; the ledger
        // only refuses changes.)
        try connection.execute("INSERT INTO wallet.wallets (user_id, currency, balance) VALUES ('full', 'coin', 9223372036854775000)")
        try connection.execute("""
            WITH entry AS (
                INSERT INTO wallet.entries (user_id, currency, amount, balance_after, kind, reference, client)
                VALUES ('full', 'coin', 9223372036854775000, 9223372036854775000, 'grant', 'setup', 'tests')
                RETURNING id
            ), lot AS (
                INSERT INTO wallet.lots (user_id, currency, source, paid, amount, remaining, entry_id)
                SELECT 'full', 'coin', 'grant', FALSE, 9223372036854775000, 9223372036854775000, id FROM entry
                RETURNING id, entry_id
            )
            INSERT INTO wallet.entry_lots (entry_id, lot_id, amount) SELECT entry_id, id, 9223372036854775000 FROM lot
            """)
        try connection.query("SELECT * FROM wallet.grant_coins('held', 10, 'coin', 'setup', 'tests')")

        var configuration = ConnectionPool.Configuration(connection: database)
        configuration.maximumConnections = 1
        let pool = ConnectionPool(configuration: configuration, logger: Logger(label: "test", sink: .discard))
        let metrics = RecordedStoreMetrics()
        let writer = GroupCommit(writerCount: 1, batchOperationsMax: 256, pool: pool, metrics: metrics,
                                 logger: Logger(label: "test", sink: .discard))
        defer { writer.shutdown(timeoutSeconds: 10); pool.shutdown() }

        // Hold the writer on a first batch, so the rest queue up behind it.
        let blocker = try Connection(options: database)
        try blocker.execute("BEGIN")
        try blocker.execute("SELECT 1 FROM wallet.wallets WHERE user_id = 'held' FOR UPDATE")
        let results = Locked<[String: Result<GroupCommit.Outcome, any Error>]>([:])
        let deadline = ContinuousClock.now + .seconds(60)
        func submit(_ name: String, _ operation: GroupCommit.Operation) {
            writer.submit(operation, deadline: deadline) { result in results.withLock { $0[name] = result } }
        }
        submit("held", .debit(debit("held-1", "held", 1)))
        #expect(TestDatabase.waitForLockWaiters(on: connection), "the first batch never reached the held row")
        submit("overflow", .credit(credit("boom", "full", "guodong5000")))
        for index in 0..<20 {
            submit("good-\(index)", .credit(credit("good-\(index)", "user-\(index)")))
        }
        // The writer is held, so all 21 are queued behind it: one batch.
        #expect(waitFor(seconds: 30) { writer.queueDepth == 21 }, "queued: \(writer.queueDepth)")
        try blocker.execute("COMMIT")

        _ = waitFor(seconds: 30) { results.withLock { $0.count } == 22 }
        let outcomes = results.withLock { $0 }
        #expect(outcomes.count == 22)
        // The bad one fails alone; every other one is applied.
        if case .failure(let error as PostgresError)? = outcomes["overflow"] {
            #expect(error.sqlState == SQLState("22003"))
        } else {
            Issue.record("the overflowing credit did not fail: \(String(describing: outcomes["overflow"]))")
        }
        for index in 0..<20 {
            guard case .success(.credit(let result))? = outcomes["good-\(index)"] else {
                Issue.record("good-\(index): \(String(describing: outcomes["good-\(index)"]))")
                continue
            }
            #expect(result.outcome == .credited)
        }
        // The overflow failed twice: once with its whole batch, once alone.
        #expect(metrics.databaseErrors("sqlstate_22003") == 2)
        #expect(try connection.query("SELECT count(*) FROM wallet.credits")[0].decode(Int.self, at: 0) == 20)
        #expect(try LedgerStore.checkInvariants(on: connection) == [])
    }

    /// Waits for one operation's answer, at most `seconds`.
    func answer(_ writer: GroupCommit, _ operation: GroupCommit.Operation,
                within time: Duration = .seconds(30)) -> Result<GroupCommit.Outcome, any Error>? {
        let result = Locked<Result<GroupCommit.Outcome, any Error>?>(nil)
        let done = DispatchSemaphore(value: 0)
        writer.submit(operation, deadline: .now + time) { answer in
            result.withLock { $0 = answer }
            done.signal()
        }
        _ = done.wait(timeout: .now() + .seconds(Int(time.components.seconds) + 5))
        return result.withLock { $0 }
    }

    /// A batch runs against its items' earliest deadline, so an operation
    /// with almost no time left is answered without being sent: otherwise it
    /// would cut its whole batch's time short and turn every operation of it
    /// into an unknown outcome.
    @Test func anOperationWithTooLittleTimeLeftIsNotSent() throws {
        let database = try TestDatabase.make()
        var configuration = ConnectionPool.Configuration(connection: database)
        configuration.maximumConnections = 1
        let pool = ConnectionPool(configuration: configuration, logger: Logger(label: "test", sink: .discard))
        let writer = GroupCommit(writerCount: 1, batchOperationsMax: 256, pool: pool, metrics: RecordedStoreMetrics(),
                                 logger: Logger(label: "test", sink: .discard))
        defer { writer.shutdown(timeoutSeconds: 10); pool.shutdown() }

        let hurried = answer(writer, .credit(credit("hurried-1", "ann")), within: GroupCommit.sendTimeMin / 2)
        guard case .failure(let error as WalletError)? = hurried else {
            Issue.record("an operation with too little time left was run: \(String(describing: hurried))")
            return
        }
        #expect(error == .databaseUnavailable)
        guard case .success(.credit(let result))? = answer(writer, .credit(credit("patient-1", "ann"))) else {
            Issue.record("an operation with time to spare was not applied")
            return
        }
        #expect(result.outcome == .credited)
        let connection = try Connection(options: database)
        #expect(try connection.query("SELECT count(*) FROM wallet.credits")[0].decode(Int.self, at: 0) == 1)
        #expect(try connection.query("SELECT count(*) FROM wallet.credits WHERE flow_no = 'hurried-1'")[0]
            .decode(Int.self, at: 0) == 0)
    }

    @Test func aConnectionThatDiedBeforeSendingIsRetriedTransparently() throws {
        let database = try TestDatabase.make()
        let connection = try Connection(options: database)
        try connection.query("SELECT * FROM wallet.grant_coins('alice', 10, 'coin', 'setup', 'tests')")
        var options = database
        options.applicationName = "wallet-writer-under-test"
        var configuration = ConnectionPool.Configuration(connection: options)
        configuration.maximumConnections = 1
        let pool = ConnectionPool(configuration: configuration, logger: Logger(label: "test", sink: .discard))
        let writer = GroupCommit(writerCount: 1, batchOperationsMax: 256, pool: pool, metrics: RecordedStoreMetrics(),
                                 logger: Logger(label: "test", sink: .discard))
        defer { writer.shutdown(timeoutSeconds: 10); pool.shutdown() }

        guard case .success(.debit(let first))? = answer(writer, .debit(debit("k1", "alice", 1))) else {
            Issue.record("the first debit failed")
            return
        }
        #expect(first.outcome == .debited)
        // The server ends the writer's idle session, as a restart would.
        try connection.query("""
            SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'wallet-writer-under-test'
            """)
        #expect(waitFor(seconds: 30) {
            (try? connection.query("""
                SELECT count(*) FROM pg_stat_activity WHERE application_name = 'wallet-writer-under-test'
                """)[0].decode(Int.self, at: 0)) == 0
        })
        // Nothing was sent on the dead connection: the debit runs on a new one.
        let answered = answer(writer, .debit(debit("k2", "alice", 1)))
        guard case .success(.debit(let second))? = answered else {
            Issue.record("the debit after the session ended failed: \(String(describing: answered))")
            return
        }
        #expect(second.outcome == .debited)
        #expect(pool.statistics.broken == 1)
        #expect(try connection.query("SELECT balance FROM wallet.wallets WHERE user_id = 'alice'")[0]
            .decode(Int64.self, at: 0) == 8)
    }

    @Test func aStoppingWriterRefusesWithShuttingDownAndQueuesNothing() throws {
        let database = try TestDatabase.make()
        let pool = ConnectionPool(configuration: .init(connection: database), logger: Logger(label: "test", sink: .discard))
        defer { pool.shutdown() }
        let writer = GroupCommit(writerCount: 2, batchOperationsMax: 256, pool: pool, metrics: RecordedStoreMetrics(),
                                 logger: Logger(label: "test", sink: .discard))
        writer.shutdown(timeoutSeconds: 10)
        #expect(writer.isStopping)
        guard case .failure(let error)? = answer(writer, .credit(credit("late", "bob"))) else {
            Issue.record("a credit was taken after shutdown")
            return
        }
        #expect(error as? WalletError == .shuttingDown)
        #expect(writer.queueDepth == 0)
        let connection = try Connection(options: database)
        #expect(try connection.query("SELECT count(*) FROM wallet.credits")[0].decode(Int.self, at: 0) == 0)
    }

    @Test func oneRuleSaysWhatAFailedWriteMeans() {
        func failure(_ kind: PostgresError.Kind, _ state: SQLState? = nil, sent: Bool) -> StoreFailure {
            StoreFailure(PostgresError(kind: kind, sqlState: state, sent: sent))
        }
        // Never reached the server: run it again.
        #expect(failure(.connection, sent: false) == .notSent)
        // Sent, then no answer: it may have committed.
        #expect(failure(.connection, SQLState.adminShutdown, sent: true) == .outcomeUnknown)
        #expect(failure(.deadline, sent: true) == .outcomeUnknown)
        // Out of time or connections before anything was sent.
        #expect(failure(.deadline, sent: false) == .timeout)
        #expect(failure(.poolTimeout, sent: false) == .timeout)
        #expect(failure(.poolClosed, sent: false) == .unavailable)
        // The server said ERROR: nothing committed.
        #expect(failure(.server, SQLState.lockNotAvailable, sent: true) == .busy)
        #expect(failure(.server, SQLState.concurrentTake, sent: true) == .conflict)
        // debit_many inserts keys plainly: another transaction's key is a race too.
        #expect(StoreFailure(PostgresError(kind: .server, sqlState: .uniqueViolation, constraint: "idempotency_keys_pkey",
                                           sent: true)) == .conflict)
        #expect(StoreFailure(PostgresError(kind: .server, sqlState: .uniqueViolation, constraint: "entries_pkey",
                                           sent: true)) == .rejected)
        #expect(failure(.server, SQLState.checkViolation, sent: true) == .rejected)
        #expect(failure(.transaction(.commit), SQLState.serializationFailure, sent: true) == .rejected)

        #expect(StoreFailure.walletError(writing: PostgresError(kind: .deadline, sent: true)) == .outcomeUnknown)
        #expect(StoreFailure.walletError(writing: PostgresError(kind: .deadline, sent: false)) == .databaseUnavailable)
        #expect(StoreFailure.walletError(writing: PostgresError(kind: .server, sqlState: .lockNotAvailable, sent: true))
            == .walletBusy)
        #expect(StoreFailure.walletError(writing: PostgresError(kind: .server, sqlState: .checkViolation, sent: true)) == nil)
        #expect(StoreFailure.walletError(writing: PostgresError(kind: .server, sqlState: .concurrentTake, sent: true))
            == .walletBusy)
        #expect(StoreFailure.walletError(writing: PostgresError(kind: .poolTimeout, sent: false)) == .databaseUnavailable)
        // A read changes nothing: whatever happened, it is only unavailable.
        #expect(StoreFailure.walletError(reading: PostgresError(kind: .deadline, sent: true)) == .databaseUnavailable)
    }
}
