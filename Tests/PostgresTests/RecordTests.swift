import Foundation
import Postgres
import Testing
import TestSupport

/// Composite values go to the server as record literals inside an array
/// literal: two levels of quoting that no field may break out of.
@Suite(.timeLimit(.minutes(2)))
struct RecordTests {
    @Test func fieldsSurviveBothLevelsOfQuoting() throws {
        let connection = try Connection(options: try TestDatabase.make())
        try connection.execute("CREATE TYPE probe AS (a TEXT, b BYTEA, c JSONB, d BIGINT, e TEXT)")
        let awkward = [
            "", " ", "plain", "a,b", "(paren)", "{brace}", "quote\"d", "back\\slash", "\\\\", "\"\"",
            "NULL", "null", "tab\tnew\nline", "é ✓ 😀", "x'); DROP TABLE t; --", "\",\"(\")",
        ]
        var records: [PostgresRecord] = []
        for (index, text) in awkward.enumerated() {
            let json = #"{"s":"\#(text.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "\"", with: "\\\"").replacingOccurrences(of: "\t", with: "\\t").replacingOccurrences(of: "\n", with: "\\n"))"}"#
            records.append(PostgresRecord([text, ByteA(Array(text.utf8)), json, Int64(index) - 3, nil]))
        }
        // A record of NULLs, and one with only an empty string.
        records.append(PostgresRecord([nil, nil, nil, nil, nil]))
        records.append(PostgresRecord(["", nil, nil, nil, ""]))

        let rows = try connection.query("""
            SELECT r.a, r.b, r.c ->> 's', r.d, r.e IS NULL, r.a IS NULL FROM unnest(\(records)::probe[]) r
            """)
        #expect(rows.count == awkward.count + 2)
        for (index, text) in awkward.enumerated() {
            let row = rows[index]
            #expect(try row.decode(String.self, at: 0) == text)
            #expect(try row.decode(ByteA.self, at: 1).bytes == Array(text.utf8))
            #expect(try row.decode(String.self, at: 2) == text)
            #expect(try row.decode(Int64.self, at: 3) == Int64(index) - 3)
            #expect(try row.decode(Bool.self, at: 4))
        }
        #expect(try rows[awkward.count].decode(Bool.self, at: 5))
        #expect(try rows[awkward.count + 1].decode(String.self, at: 0) == "")
        #expect(try !rows[awkward.count + 1].decode(Bool.self, at: 4))
        #expect(try connection.query("SELECT count(*) FROM pg_type WHERE typname = 'probe'")[0].decode(Int.self, at: 0) == 1)
    }

    @Test func timestampsReadAsRFC3339WithMicroseconds() throws {
        let connection = try Connection(options: try TestDatabase.make())
        let row = try #require(try connection.query("""
            SELECT '2026-01-02 03:04:05.6789+00'::timestamptz, '2026-01-02 03:04:05+00'::timestamptz,
                   '2026-12-31 23:59:59.999999+00'::timestamptz, '2026-06-01 12:00:00.5+02'::timestamptz
            """).single)
        #expect(try row.decode(Timestamp.self, at: 0).rfc3339 == "2026-01-02T03:04:05.678900Z")
        #expect(try row.decode(Timestamp.self, at: 1).rfc3339 == "2026-01-02T03:04:05.000000Z")
        #expect(try row.decode(Timestamp.self, at: 2).rfc3339 == "2026-12-31T23:59:59.999999Z")
        // The connection runs in UTC whatever the literal said.
        #expect(try row.decode(Timestamp.self, at: 3).rfc3339 == "2026-06-01T10:00:00.500000Z")
        // The same text the ledger's own SQL formatter writes, for any instant.
        for row in try connection.query("""
            SELECT t, wallet.rfc3339(t) FROM (SELECT now() + make_interval(secs => g * 0.1234567) AS t
                                          FROM generate_series(0, 50) g) s
            """) {
            #expect(try row.decode(Timestamp.self, at: 0).rfc3339 == row.decode(String.self, at: 1))
        }
        #expect(throws: PostgresError.self) { try Timestamp(postgresText: "2026-01-02T03:04:05Z") }
        #expect(throws: PostgresError.self) { try Timestamp(postgresText: "infinity") }
    }
}
