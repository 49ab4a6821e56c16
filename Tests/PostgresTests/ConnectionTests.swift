import Foundation
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
        let error = try #require(throws: PostgresError.self) { try connection.execute("SELECT pg_sleep(5)") }
        #expect(error.sqlState == .queryCanceled)
    }

    @Test func unreachableServerIsAConnectionError() throws {
        var options = Connection.Options(conninfo: "host=/nonexistent-wallet-socket-dir port=5432 dbname=x")
        options.connectTimeoutSeconds = 2
        let error = try #require(throws: PostgresError.self) { try Connection(options: options) }
        #expect(error.kind == .connection)
        #expect(error.isUnavailable)
    }
}
