import Foundation
import Locking
import Postgres
import Testing
import TestSupport

@Suite(.timeLimit(.minutes(2)))
struct ConnectionTests {
    @Test func bindParametersCarryValuesNeverSQL() throws {
        let connection = try Connection(options: try TestDatabase.make())
        try connection.execute("CREATE TABLE t (name TEXT)")
        let hostile = "x'); DROP TABLE t; --"
        try connection.query("INSERT INTO t (name) VALUES (\(hostile))")
        let rows = try connection.query("SELECT name, count(*) OVER () FROM t")
        #expect(rows.count == 1)
        #expect(try rows[0].decode(String.self, at: 0) == hostile)
    }

    /// NOTICEs are kept, in order and NOTICEs alone, only while asked for.
    @Test func noticesAreCollectedOnlyWhileAskedFor() throws {
        let connection = try Connection(options: try TestDatabase.make())
        try connection.execute("DO $$ BEGIN RAISE NOTICE 'before'; END $$")
        let (count, notices) = try connection.collectingNotices { connection in
            try connection.execute("DO $$ BEGIN RAISE NOTICE 'one'; RAISE INFO 'aside'; RAISE NOTICE 'two'; END $$")
            return try connection.query("SELECT 1").count
        }
        #expect(count == 1)
        #expect(notices == ["one", "two"])
        try connection.execute("DO $$ BEGIN RAISE NOTICE 'after'; END $$")
        #expect(connection.collectingNotices { _ in }.notices == [])
    }

    @Test func decodesTypedValues() throws {
        let connection = try Connection(options: try TestDatabase.make())
        let row = try #require(try connection.query("""
            SELECT \(Int64.max)::bigint AS big, \(true)::boolean AS yes, NULL::text AS nothing,
                   \(ByteA([0, 1, 254, 255]))::bytea AS bytes, \(["a\"b", "c\\d", "e,f"])::text[] AS list
            """).single)
        #expect(try row.decode(Int64.self, column: "big") == Int64.max)
        #expect(try row.decode(Bool.self, column: "yes"))
        #expect(try row.decodeIfPresent(String.self, column: "nothing") == nil)
        #expect(try row.decode(ByteA.self, column: "bytes").bytes == [0, 1, 254, 255])
        #expect(row["list"] == #"{"a\"b","c\\d","e,f"}"#)
        #expect(throws: PostgresError.self) { try row.decode(Int64.self, column: "nothing") }
    }

    @Test func serverErrorsCarrySQLStateAndAGenericDescription() throws {
        let connection = try Connection(options: try TestDatabase.make())
        try connection.execute("CREATE TABLE u (id INT PRIMARY KEY)")
        try connection.query("INSERT INTO u VALUES (\(1))")
        let error = try #require(throws: PostgresError.self) {
            try connection.query("INSERT INTO u VALUES (\(1))")
        }
        #expect(error.sqlState == .uniqueViolation)
        #expect(error.constraint == "u_pkey")
        #expect(error.description == "PostgreSQL error 23505")
        #expect(!error.description.contains("(id)=(1)"))
        #expect(error.debugDescription.contains("duplicate key"))
        #expect(!connection.isBroken)
    }

    @Test func preparedStatementsAreReused() throws {
        let connection = try Connection(options: try TestDatabase.make())
        for value in 1...5 {
            let row = try #require(try connection.prepared("SELECT \(value)::int + 1").single)
            #expect(try row.decode(Int.self, at: 0) == value + 1)
        }
        let prepared = try connection.query("SELECT count(*) FROM pg_prepared_statements")
        #expect(try prepared[0].decode(Int.self, at: 0) == 1)
    }

    /// Lifting the timeout for a migration must not leave the connection
    /// unbounded afterwards: RESET would put back the server's default
    /// (none), not the limit the connection was opened with.
    @Test func liftingTheStatementTimeoutPutsTheSessionsOwnBack() throws {
        var options = try TestDatabase.make()
        options.statementTimeoutMilliseconds = 1_234
        let connection = try Connection(options: options)
        func timeout() throws -> String {
            try connection.query("SELECT current_setting('statement_timeout')").single!.decode(String.self, at: 0)
        }
        let inside = try connection.withoutStatementTimeout { _ in try timeout() }
        #expect(inside == "0")
        #expect(try timeout() == "1234ms")
        struct Failed: Error {}
        #expect(throws: Failed.self) { try connection.withoutStatementTimeout { _ in throw Failed() } }
        #expect(try timeout() == "1234ms")
    }

    @Test func aTransactionThatThrowsLeavesNothingBehind() throws {
        let connection = try Connection(options: try TestDatabase.make())
        try connection.execute("CREATE TABLE v (id INT)")
        struct Failed: Error {}
        #expect(throws: Failed.self) {
            try connection.withTransaction { connection in
                try connection.execute("INSERT INTO v VALUES (1)")
                throw Failed()
            }
        }
        #expect(!connection.isInTransaction)
        try connection.withTransaction { try $0.execute("INSERT INTO v VALUES (2)") }
        #expect(try connection.query("SELECT id FROM v").map { try $0.decode(Int.self, at: 0) } == [2])
    }

    @Test func statementTimeoutIsEnforced() throws {
        var options = try TestDatabase.make()
        options.statementTimeoutMilliseconds = 100
        let connection = try Connection(options: options)
        // The statement under test: pg_sleep outlasts the timeout.
        let error = try #require(throws: PostgresError.self) { try connection.execute("SELECT pg_sleep(5)") }
        #expect(error.sqlState == .queryCanceled)
    }

    @Test func preparedStatementsCanBeTurnedOffForAPoolerInTransactionMode() throws {
        var options = try TestDatabase.make()
        options.preparedStatements = false
        let connection = try Connection(options: options)
        for value in 1...3 {
            #expect(try connection.prepared("SELECT \(value)::int * 2").single!.decode(Int.self, at: 0) == value * 2)
            _ = try connection.withLocalSettings { try $0.prepared("SELECT \(value)::int") }
        }
        let prepared = try connection.query("SELECT count(*) FROM pg_prepared_statements")
        #expect(try prepared[0].decode(Int.self, at: 0) == 0)
    }

    /// A pooler in transaction mode may hand a transaction a server
    /// connection where the session settings were never made: every
    /// transaction that writes brings its own, and they end with it.
    @Test(arguments: [true, false]) func eachWriteTransactionBringsItsOwnSettings(prepared: Bool) throws {
        var options = try TestDatabase.make()
        options.statementTimeoutMilliseconds = 4_321
        options.lockTimeoutMilliseconds = 321
        options.preparedStatements = prepared
        let connection = try Connection(options: options)
        let show = PostgresQuery(unsafeSQL: """
            SELECT current_setting('statement_timeout'), current_setting('lock_timeout'), current_setting('synchronous_commit')
            """)
        func settings(_ rows: Rows) throws -> [String] {
            try (0..<3).map { try rows[0].decode(String.self, at: $0) }
        }
        // What another client's session could have left behind.
        try connection.execute(PostgresQuery(unsafeSQL: "SELECT set_config('statement_timeout', '0', false), "
            + "set_config('lock_timeout', '0', false), set_config('synchronous_commit', 'off', false)"))
        let expected = ["4321ms", "321ms", "on"]
        #expect(try settings(connection.withLocalSettings { try $0.prepared(show) }) == expected)
        #expect(try settings(connection.query(show)) == ["0", "0", "off"])
        try connection.begin()
        #expect(try settings(connection.prepared(show)) == expected)
        try connection.execute("COMMIT")
        #expect(try settings(connection.query(show)) == ["0", "0", "off"])
        // The statement after the settings runs under them: pg_sleep, which
        // outlasts their timeout.
        let error = try #require(throws: PostgresError.self) {
            try connection.withLocalSettings { try $0.query("SELECT pg_sleep(10)") }
        }
        #expect(error.sqlState == .queryCanceled)
        #expect(!connection.isBroken && !connection.isInTransaction)
        // A refused statement in the pipeline is reported, and the
        // connection is still usable after it.
        let refused = try #require(throws: PostgresError.self) {
            try connection.withLocalSettings { try $0.query("SELECT 1/0") }
        }
        #expect(refused.sqlState == SQLState("22012"))
        #expect(try connection.query("SELECT 7").single!.decode(Int.self, at: 0) == 7)
    }

    /// A server that takes no writes (a standby; a primary mid-promotion)
    /// refuses with 25006 before running anything: the connection is given
    /// up, and the write counts as never sent, so it may run elsewhere.
    @Test func aServerThatTakesNoWritesIsUnavailableAndNothingRan() throws {
        let connection = try Connection(options: try TestDatabase.make())
        try connection.execute("CREATE TABLE w (id INT)")
        try connection.execute("SET default_transaction_read_only = on")
        let error = try #require(throws: PostgresError.self) { try connection.query("INSERT INTO w VALUES (1)") }
        #expect(error.sqlState == .readOnlySQLTransaction)
        #expect(error.kind == .connection)
        #expect(error.isUnavailable)
        #expect(!error.sent)
        #expect(connection.isBroken)
    }

    /// A session the server ends while the statement runs (57P01, as in a
    /// switchover) was answered with the server's error before the
    /// statement completed: nothing committed, so it counts as unsent.
    @Test func aSessionEndedMidStatementCountsAsNeverRun() throws {
        let options = try TestDatabase.make()
        let connection = try Connection(options: options)
        let pid = try connection.query("SELECT pg_backend_pid()")[0].decode(Int.self, at: 0)
        let admin = try Connection(options: options)
        let outcome = Locked<PostgresError?>(nil)
        let thread = Thread {
            do {
                // The statement the session ends under: pg_sleep, still running then.
                _ = try connection.withLocalSettings { try $0.query("SELECT pg_sleep(30)") }
            } catch let error as PostgresError {
                outcome.withLock { $0 = error }
            } catch {}
        }
        thread.start()
        #expect(waitFor(seconds: 20) {
            (try? admin.query("SELECT count(*) FROM pg_stat_activity WHERE pid = \(pid) AND wait_event = 'PgSleep'")[0]
                .decode(Int.self, at: 0)) == 1
        })
        try admin.query("SELECT pg_terminate_backend(\(pid))")
        #expect(waitFor(seconds: 20) { outcome.withLock { $0 != nil } })
        let error = try #require(outcome.withLock { $0 })
        #expect(error.sqlState == .adminShutdown, "\(error.debugDescription)")
        #expect(error.kind == .connection)
        #expect(!error.sent)
    }

    /// The same session ended behind PgBouncer, by a server that vanished
    /// (its backend killed) rather than one that said why: the pooler
    /// answers in the server's place ("server conn crashed?", 08P01), which
    /// proves nothing about what the server did before it went. The
    /// statement may have committed, so it counts as sent.
    @Test func aPoolersReportOfAVanishedServerMayHaveCommitted() throws {
        let cluster = try TestCluster.start(name: "vanished")
        defer { TestCluster.destroy(cluster) }
        let bouncer = try PgBouncer(before: cluster, database: "postgres", resetEveryTransaction: false)
        defer { bouncer.stop() }
        let connection = try Connection(options: .init(conninfo: bouncer.conninfo(database: "postgres")))
        defer { connection.close() }
        let admin = try Connection(options: .init(conninfo: cluster.conninfo()))
        defer { admin.close() }
        let outcome = Locked<PostgresError?>(nil)
        let thread = Thread {
            do {
                // The statement the session ends under: pg_sleep, still running then.
                _ = try connection.withLocalSettings { try $0.query("SELECT pg_sleep(30)") }
            } catch let error as PostgresError {
                outcome.withLock { $0 = error }
            } catch {}
        }
        thread.start()
        var pid: Int32?
        #expect(waitFor(seconds: 20) {
            pid = try? admin.query("SELECT pid FROM pg_stat_activity WHERE wait_event = 'PgSleep'").single?
                .decode(Int32.self, at: 0)
            return pid != nil
        })
        #expect(kill(try #require(pid), SIGKILL) == 0)
        #expect(waitFor(seconds: 20) { outcome.withLock { $0 != nil } })
        let error = try #require(outcome.withLock { $0 })
        #expect(error.sqlState?.code.hasPrefix("08") == true, "\(error.debugDescription)")
        #expect(error.kind == .connection)
        #expect(error.sent)
    }

    @Test func unreachableServerIsAConnectionError() throws {
        var options = Connection.Options(conninfo: "host=/nonexistent-wallet-socket-dir port=5432 dbname=x")
        options.connectTimeoutSeconds = 2
        let error = try #require(throws: PostgresError.self) { try Connection(options: options) }
        #expect(error.kind == .connection)
        #expect(error.isUnavailable)
    }
}
