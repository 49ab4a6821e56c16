import Foundation
import Postgres
import Testing
import TestSupport
import Timestamps

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

    @Test func timestampsReadAsDatesAndWriteBackAsTheLedgerDoes() throws {
        let connection = try Connection(options: try TestDatabase.make())
        let row = try #require(try connection.query("""
            SELECT '2026-01-02 03:04:05.6789+00'::timestamptz, '2026-01-02 03:04:05+00'::timestamptz,
                   '2026-12-31 23:59:59.999999+00'::timestamptz, '2026-06-01 12:00:00.5+02'::timestamptz,
                   '1969-12-31 23:59:59.999999+00'::timestamptz
            """).single)
        #expect(try row.decode(Date.self, at: 0).rfc3339 == "2026-01-02T03:04:05.678900Z")
        #expect(try row.decode(Date.self, at: 1).rfc3339 == "2026-01-02T03:04:05.000000Z")
        #expect(try row.decode(Date.self, at: 1) == Date(timeIntervalSince1970: 1_767_323_045))
        #expect(try row.decode(Date.self, at: 2).rfc3339 == "2026-12-31T23:59:59.999999Z")
        // The connection runs in UTC whatever the literal said.
        #expect(try row.decode(Date.self, at: 3).rfc3339 == "2026-06-01T10:00:00.500000Z")
        #expect(try row.decode(Date.self, at: 4).rfc3339 == "1969-12-31T23:59:59.999999Z")

        // The same text the ledger's own SQL formatter writes, to the
        // microsecond, for instants all over the span a Date holds exactly
        // (2^33 seconds either side of 2001: 1728-10-18T11:03:28Z to
        // 2273-03-16T12:56:32Z), its edges, and times near now; and a Date sent as
        // a parameter is the instant it holds.
        let edges = ["1970-01-01 00:00:00+00", "2000-02-29 23:59:59.999999+00", "2100-02-28 12:00:00.000001+00",
                     "2100-03-01 00:00:00+00", "1728-10-18 11:03:28.000001+00", "2273-03-16 12:56:31.999999+00",
                     "2038-01-19 03:14:08.123456+00", "1900-01-01 00:00:00.5+00"]
        var random = SplitMix64(seed: 3339)
        let span = 8_589_934_591 // 2^33 - 1 seconds on each side of 2001-01-01
        var seconds: [Int64] = []
        var microseconds: [Int64] = []
        for index in 0..<4_000 {
            let offset = index.isMultiple(of: 2) ? 800_000_000 + random.below(400_000_000) - 200_000_000
                : random.below(2 * span) - span
            seconds.append(978_307_200 + Int64(offset))
            microseconds.append(Int64(random.below(1_000_000)))
        }
        let rows = try connection.query("""
            SELECT t, wallet.rfc3339(t) FROM unnest(\(edges)::timestamptz[]) t
            UNION ALL
            SELECT to_timestamp(s) + u * INTERVAL '1 microsecond', wallet.rfc3339(to_timestamp(s) + u * INTERVAL '1 microsecond')
            FROM unnest(\(seconds)::bigint[], \(microseconds)::bigint[]) AS x(s, u)
            """)
        #expect(rows.count == edges.count + seconds.count)
        var mismatches: [String] = []
        for row in rows {
            let date = try row.decode(Date.self, at: 0)
            let ledger = try row.decode(String.self, at: 1)
            if date.rfc3339 != ledger { mismatches.append("\(ledger) written \(date.rfc3339)") }
            let same = try connection.query("SELECT \(date)::timestamptz = \(ledger)::timestamptz")[0].decode(Bool.self, at: 0)
            if !same { mismatches.append("\(ledger) sent back as \(date.rfc3339)") }
        }
        #expect(mismatches.isEmpty, "\(mismatches.count) of \(rows.count): \(mismatches.prefix(5))")

        // What the ledger never stores is refused, not guessed.
        for text in ["2026-01-02T03:04:05Z", "infinity", "-infinity", "0001-01-01 00:00:00+00 BC",
                     "10000-01-01 00:00:00+00", "2026-13-01 00:00:00+00", "2026-02-29 00:00:00+00",
                     "2026-01-02 03:04:05.1234567+00", "2026-01-02 03:04:05.+00", "2026-01-02 03:04:05+02",
                     "2026-01-02 24:00:00+00", "2026-01-02 03:04"] {
            #expect(throws: PostgresError.self, "\(text)") { try Date(postgresText: text) }
        }
        // Far past the exact span (a Google event time may be in year 9999)
        // a time still reads, to the precision a Date holds there.
        let far = try Date(postgresText: "9999-12-31 23:59:59.999+00")
        #expect(far.rfc3339.hasPrefix("9999-12-31T23:59:59.99"))
        #expect(abs(far.timeIntervalSince1970 - 253_402_300_799.999) < 0.000_1)
    }
}
