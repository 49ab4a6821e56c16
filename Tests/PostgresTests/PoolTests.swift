import Foundation
import Locking
import Logging
import Postgres
import Synchronization
import Testing
import TestSupport

@Suite(.timeLimit(.minutes(2)))
struct PoolTests {
    @Test func exhaustionTimesOutWithAnError() throws {
        var configuration = ConnectionPool.Configuration(connection: try TestDatabase.make())
        configuration.maximumConnections = 2
        configuration.acquireTimeoutMilliseconds = 200
        let pool = ConnectionPool(configuration: configuration, logger: Logger(label: "test", level: .error, sink: .discard))
        let first = try pool.acquire()
        let second = try pool.acquire()
        #expect(pool.statistics.inUse == 2)
        let started = Date()
        let error = try #require(throws: PostgresError.self) { try pool.acquire() }
        #expect(error.kind == .poolTimeout)
        #expect(Date().timeIntervalSince(started) >= 0.15)
        pool.release(first)
        // A connection given back is handed to the next waiter.
        let third = try pool.acquire()
        #expect(third === first)
        pool.release(second)
        pool.release(third)
        #expect(pool.statistics.open == 2 && pool.statistics.inUse == 0)
    }

    @Test func waitersAreServedAsConnectionsComeBack() throws {
        let pool = try TestDatabase.makePool(maximumConnections: 3)
        let done = Atomic<Int>(0)
        runOnThreads(24) { index in
            do {
                let value = try pool.withConnection { connection in
                    // Each holds its connection for a moment (pg_sleep), so
                    // the others queue for the three.
                    try connection.query("SELECT \(index)::int, pg_sleep(0.01)")[0].decode(Int.self, at: 0)
                }
                if value == index { done.add(1, ordering: .relaxed) }
            } catch {}
        }
        #expect(done.load(ordering: .relaxed) == 24)
        #expect(pool.statistics.open <= 3)
    }

    @Test func reconnectsAfterServerRestart() throws {
        let cluster = try TestCluster.start(name: "pool-restart")
        defer { TestCluster.destroy(cluster) }
        var configuration = ConnectionPool.Configuration(connection: Connection.Options(conninfo: cluster.conninfo()))
        configuration.maximumConnections = 3
        let pool = ConnectionPool(configuration: configuration, logger: Logger(label: "test", level: .error, sink: .discard))
        // Fill the pool with idle connections that the restart will kill.
        let held = try (0..<3).map { _ in try pool.acquire() }
        held.forEach(pool.release)
        #expect(pool.statistics.open == 3)

        try cluster.restart(mode: .fast)

        // The next transaction meets a dead connection at BEGIN and is
        // retried on a fresh one; the rest of the stale ones are dropped.
        let value = try pool.withTransaction { connection in
            try connection.query("SELECT 42")[0].decode(Int.self, at: 0)
        }
        #expect(value == 42)
        for _ in 0..<5 {
            _ = try pool.withTransaction { try $0.query("SELECT 1") }
        }
        #expect(pool.statistics.broken >= 1)
        #expect(pool.statistics.open <= 3)
    }

    @Test func unreachableDatabaseFailsFastAndRecovers() throws {
        let cluster = try TestCluster.start(name: "pool-down")
        defer { TestCluster.destroy(cluster) }
        var configuration = ConnectionPool.Configuration(connection: Connection.Options(conninfo: cluster.conninfo()))
        configuration.maximumConnections = 2
        let pool = ConnectionPool(configuration: configuration, logger: Logger(label: "test", level: .error, sink: .discard))
        _ = try pool.withConnection { try $0.query("SELECT 1") }
        try cluster.stop(mode: .fast)
        let started = Date()
        let error = try #require(throws: PostgresError.self) {
            try pool.withTransaction { try $0.query("SELECT 1") }
        }
        #expect(error.isUnavailable)
        #expect(Date().timeIntervalSince(started) < 10)
        try cluster.start()
        _ = try pool.withTransaction { try $0.query("SELECT 1") }
    }

    @Test func withTransactionRetriesDeadlocks() throws {
        let pool = try TestDatabase.makePool(maximumConnections: 4)
        try pool.withConnection { connection in
            try connection.execute("CREATE TABLE acct (id INT PRIMARY KEY, n INT NOT NULL)")
            try connection.execute("INSERT INTO acct VALUES (1, 0), (2, 0)")
        }
        // Two transactions lock the same two rows in opposite orders; the
        // server kills one as a deadlock, and withTransaction re-runs it.
        // Each first run waits until both hold their first row, so the two
        // do deadlock.
        let attempts = Atomic<Int>(0)
        let holdingFirstRow = Monitor(0)
        let finished = runOnThreads(2) { index in
            let (a, b) = index == 0 ? (1, 2) : (2, 1)
            var firstRun = true
            try? pool.withTransaction { connection in
                attempts.add(1, ordering: .relaxed)
                try connection.query("UPDATE acct SET n = n + 1 WHERE id = \(a)")
                if firstRun {
                    firstRun = false
                    holdingFirstRow.withLock { $0 += 1 }
                    holdingFirstRow.broadcast()
                    holdingFirstRow.wait(until: .now + .seconds(30)) { $0 == 2 }
                }
                try connection.query("UPDATE acct SET n = n + 1 WHERE id = \(b)")
            }
        }
        #expect(finished)
        let total = try pool.withConnection { try $0.query("SELECT sum(n) FROM acct")[0].decode(Int.self, at: 0) }
        #expect(total == 4)
        // The deadlock's victim ran again, once.
        #expect(attempts.load(ordering: .relaxed) == 3)
    }

    @Test func rollbackOnErrorLeavesNothing() throws {
        let pool = try TestDatabase.makePool()
        try pool.withConnection { try $0.execute("CREATE TABLE r (id INT PRIMARY KEY)") }
        struct Boom: Error {}
        #expect(throws: Boom.self) {
            try pool.withTransaction { connection in
                try connection.query("INSERT INTO r VALUES (\(1))")
                throw Boom()
            }
        }
        let count = try pool.withConnection { try $0.query("SELECT count(*) FROM r")[0].decode(Int.self, at: 0) }
        #expect(count == 0)
    }
}
