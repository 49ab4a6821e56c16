import Foundation
import HTTPServer
import JSON
import Postgres
import Testing
import TestSupport
import ServiceTestSupport

/// Everything that reaches the port may be hostile. Each request gets a
/// precise answer, and a rejected one writes nothing.
@Suite(.timeLimit(.minutes(3)))
struct HostileInputTests {
    @Test func checksRunInTheDocumentedOrder() throws {
        let service = try TestService()
        defer { service.stop() }
        let huge = [UInt8](repeating: UInt8(ascii: "a"), count: 2 << 20)
        func send(_ method: String, _ path: String, key: String?, contentType: String? = "application/json",
                  idempotencyKey: String? = nil, body: [UInt8]) throws -> HTTPTestResponse {
            let client = try service.client()
            defer { client.close() }
            var headers: [(name: String, value: String)] = []
            if let key { headers.append(("Authorization", "Bearer \(key)")) }
            if let contentType { headers.append(("Content-Type", contentType)) }
            if let idempotencyKey { headers.append(("Idempotency-Key", idempotencyKey)) }
            headers.append(("Content-Length", String(body.count)))
            try client.send(HTTPTestClient.requestBytes(method: method, path: path, headers: headers, port: service.port))
            // The server may answer before reading a refused body and close;
            // a failed write of the rest is expected then.
            try? client.send(body)
            return try client.readResponse()
        }
        func code(_ response: HTTPTestResponse) throws -> String? {
            guard case .string(let code)? = try response.json()["code"] else { return nil }
            return code
        }
        // 1. route and method
        #expect(try code(send("POST", "/v1/nowhere", key: nil, body: huge)) == "not_found")
        let wrongMethod = try send("PUT", "/v1/debits", key: nil, body: Array("{}".utf8))
        #expect(wrongMethod.status == 405)
        #expect(wrongMethod.header("Allow") == "POST")
        // 2. authentication, then scope, before the body's size
        #expect(try code(send("POST", "/v1/debits", key: nil, body: huge)) == "unauthorized")
        #expect(try code(send("POST", "/v1/credits", key: service.gameServerKey, body: huge)) == "forbidden")
        // 3. size, then content type
        let tooLarge = try send("POST", "/v1/debits", key: service.gameServerKey, contentType: "text/plain", body: huge)
        #expect(tooLarge.status == 413)
        #expect(try code(tooLarge) == "payload_too_large")
        #expect(try code(send("POST", "/v1/debits", key: service.gameServerKey, contentType: "text/plain",
                              body: Array("{oops".utf8))) == "unsupported_media_type")
        // The media type is compared without case, parameters or the blanks around it.
        #expect(try code(send("POST", "/v1/debits", key: service.gameServerKey, contentType: " Application/JSON\t; charset=utf-8",
                              body: Array(#"{"amount":"x"}"#.utf8))) == "idempotency_key_required")
        #expect(try code(send("POST", "/v1/debits", key: service.gameServerKey, contentType: "application/jsonx",
                              body: Array(#"{"amount":"x"}"#.utf8))) == "unsupported_media_type")
        // 4. JSON syntax, then the idempotency key
        #expect(try code(send("POST", "/v1/debits", key: service.gameServerKey, body: Array("{oops".utf8)))
                == "malformed_json")
        #expect(try code(send("POST", "/v1/debits", key: service.gameServerKey, body: Array(#"{"amount":"x"}"#.utf8)))
                == "idempotency_key_required")
        // 5. fields, each named
        let invalid = try send("POST", "/v1/debits", key: service.gameServerKey, idempotencyKey: "k1",
                               body: Array(#"{"amount":5.0,"user_id":"bad id!","colour":"red"}"#.utf8))
        #expect(invalid.status == 422)
        let fields = Set(((try? invalid.json()["errors"]).flatMap { value -> [JSONValue]? in
            if case .array(let items) = value { return items }
            return nil
        } ?? []).compactMap { item -> String? in
            if case .string(let field)? = item["field"] { return field }
            return nil
        })
        #expect(fields == ["amount", "user_id", "colour"])
        // 6. business rules
        #expect(try code(send("POST", "/v1/debits", key: service.gameServerKey, idempotencyKey: "k2",
                              body: Array(#"{"amount":5,"user_id":"nobody"}"#.utf8))) == "insufficient_funds")
        #expect(try service.count("SELECT count(*) FROM wallet.entries") == 0)
    }

    @Test func amountsMustBeIntegerLiteralsInRange() throws {
        let service = try TestService()
        defer { service.stop() }
        let connection = try Connection(options: service.database)
        try connection.query("SELECT * FROM wallet.grant_coins('alice', 1000, 'coin', 'setup', 'tests')")
        let refused = ["\"5\"", "5.0", "1e3", "0", "-1", "1000000000001", "99999999999999999999", "true", "null", "[5]"]
        for (index, amount) in refused.enumerated() {
            let response = try service.request("POST", "/v1/debits", key: service.gameServerKey,
                                               json: #"{"user_id":"alice","amount":\#(amount)}"#,
                                               headers: [("Idempotency-Key", "amount-\(index)")])
            let expectedStatus = amount == "null" ? 422 : 422
            #expect(response.status == expectedStatus, "amount \(amount)")
            #expect(try response.json()["code"] == "validation_failed", "amount \(amount)")
            #expect(response.text.contains("amount"), "amount \(amount)")
        }
        let unknownCurrency = try service.request("POST", "/v1/debits", key: service.gameServerKey,
                                                  json: #"{"user_id":"alice","amount":1,"currency":"gems"}"#,
                                                  headers: [("Idempotency-Key", "currency-1")])
        #expect(unknownCurrency.status == 422)
        #expect(try unknownCurrency.json()["code"] == "unknown_currency")
        #expect(unknownCurrency.header("Content-Type") == "application/problem+json")
        // Once the catalog has the currency, the same debit is judged on its funds.
        try connection.query("SELECT wallet.upsert_currency('gems', 'Gems')")
        let known = try service.request("POST", "/v1/debits", key: service.gameServerKey,
                                        json: #"{"user_id":"alice","amount":1,"currency":"gems"}"#,
                                        headers: [("Idempotency-Key", "currency-2")])
        #expect(known.status == 409, "\(known.text)")
        #expect(try known.json()["code"] == "insufficient_funds")
        #expect(try service.balance(of: "alice") == 1000)
    }

    /// `.` and `..` are refused as ids: as a path segment every URL library
    /// resolves them away, so such a wallet could be written and not read.
    @Test func dotSegmentIDsAreRefused() throws {
        let service = try TestService()
        defer { service.stop() }
        for id in [".", ".."] {
            let credit = try service.credit(userID: id, flowNo: "dots-\(id.count)")
            #expect(credit.status == 422, "\(credit.text)")
            #expect(try credit.json()["code"] == "validation_failed")
            let flow = try service.credit(userID: "dana", flowNo: id)
            #expect(flow.status == 422, "\(flow.text)")
            // Sent raw, as a client that does not resolve dot segments would.
            let read = try service.request("GET", "/v1/wallets/\(id)", key: service.gameServerKey)
            #expect(read.status == 422, "\(read.text)")
        }
        #expect(try service.count("SELECT count(*) FROM wallet.credits") == 0)
        #expect(try service.credit(userID: "...", flowNo: "dots-3").status == 201)
    }

    @Test func reasonsAreBoundedInCharactersAndBytes() throws {
        let service = try TestService()
        defer { service.stop() }
        let connection = try Connection(options: service.database)
        try connection.query("SELECT * FROM wallet.grant_coins('alice', 1000, 'coin', 'setup', 'tests')")
        func debit(_ reason: String, key: String) throws -> HTTPTestResponse {
            let body = JSONValue.object([("user_id", .string("alice")), ("amount", JSONValue(1)), ("reason", .string(reason))])
            return try service.request("POST", "/v1/debits", key: service.gameServerKey,
                                       json: String(decoding: body.serialized(), as: UTF8.self),
                                       headers: [("Idempotency-Key", key)])
        }
        // One user-perceived character of 5,000 combining marks: a grapheme
        // count would let 200 of these through at about 2 MB.
        let stacked = "e" + String(repeating: "\u{301}", count: 5_000)
        // 200 "é" written as e + U+0301: 200 graphemes, 400 code points.
        let decomposed = String(repeating: "e\u{301}", count: 200)
        for (index, reason) in [stacked, decomposed, String(repeating: "x", count: 201)].enumerated() {
            let refused = try debit(reason, key: "reason-refused-\(index)")
            #expect(refused.status == 422, "reason \(index)")
            #expect(try refused.json()["code"] == "validation_failed")
            #expect(refused.text.contains("reason"))
        }
        // The limits themselves: 200 code points of four bytes each is 800 bytes.
        let widest = String(repeating: "\u{1F4B0}", count: 200)
        #expect(widest.utf8.count == 800)
        #expect(try debit(widest, key: "reason-widest").status == 201)
        #expect(try debit(String(repeating: "y", count: 200), key: "reason-ascii").status == 201)
        #expect(try service.balance(of: "alice") == 998)
        #expect(try service.count("SELECT count(*) FROM wallet.entries WHERE kind = 'debit'") == 2)
    }

    /// A JSONB number is PostgreSQL's `numeric`. One it cannot hold is the
    /// client's mistake: 422 naming its path, refused before any writer sees
    /// it, where it would fail its whole batch and have every operation of
    /// that batch run again one at a time.
    @Test func metadataNumbersPostgresCannotStoreAre422AndReachNoWriter() throws {
        let service = try TestService()
        defer { service.stop() }
        let connection = try Connection(options: service.database)
        try connection.query("SELECT * FROM wallet.grant_coins('alice', 1000000, 'coin', 'setup', 'tests')")
        // Both sides of each limit: the leading digit's power of ten, the
        // digits after the point as written (zero too), and the exponent.
        let storable = ["9.999e131071", "-9e131071", "0.1e131072", "123456e131066", "1e-16383", "1.5e-16382",
                        "0.00001e-16378", "0e-16383", "0e1073741822", "0.000e131072", "1e309"]
        let unstorable = ["1e999999", "-1e999999", "1e131072", "10e131071", "123456e131067", "1e-16384", "1.50e-16382",
                          "0.00001e-16379", "0e-16384", "0.0e-16383", "0e1073741823", "1e-999999",
                          "1e99999999999999999999"]
        // The limits are PostgreSQL's own: it agrees on every literal.
        for literal in storable {
            #expect(throws: Never.self, "\(literal)") {
                try connection.query(PostgresQuery(unsafeSQL: #"SELECT '{"x":\#(literal)}'::jsonb"#))
            }
        }
        for literal in unstorable {
            let error = #expect(throws: PostgresError.self, "\(literal)") {
                try connection.query(PostgresQuery(unsafeSQL: #"SELECT '{"x":\#(literal)}'::jsonb"#))
            }
            #expect(error?.sqlState == SQLState("22003"), "\(literal)")
        }

        func post(_ path: String, metadata: String, key: String) throws -> HTTPTestResponse {
            try service.request("POST", path, key: service.gameServerKey,
                                json: #"{"user_id":"alice","amount":1,"metadata":\#(metadata)}"#,
                                headers: [("Idempotency-Key", key)])
        }
        func fields(_ response: HTTPTestResponse) throws -> [String] {
            guard case .array(let errors)? = try response.json()["errors"] else { return [] }
            return errors.compactMap { if case .string(let field)? = $0["field"] { field } else { nil } }
        }
        func series(_ prefix: String) throws -> [String] {
            try service.request("GET", "/metrics").text.split(separator: "\n").map(String.init)
                .filter { $0.hasPrefix(prefix) }
        }
        let batchesBefore = try series("wallet_batch_operations_count")
        let errorsBefore = try series("wallet_db_errors_total")
        var statuses: [Int: Int] = [:]
        for (index, literal) in unstorable.enumerated() {
            for path in ["/v1/debits", "/v1/holds"] {
                let response = try post(path, metadata: #"{"note":"fine","x":\#(literal)}"#, key: "big-\(index)")
                statuses[response.status, default: 0] += 1
                #expect(response.status == 422, "\(path) \(literal): \(response.text)")
                #expect(try response.json()["code"] == "validation_failed")
                #expect(try fields(response) == ["metadata.x"], "\(path) \(literal)")
            }
        }
        let nested = try post("/v1/debits", metadata: #"{"a":{"b":[1,1e999999]},"c":1e-99999,"d":2}"#, key: "nested")
        #expect(nested.status == 422)
        #expect(try fields(nested) == ["metadata.a.b[1]", "metadata.c"])
        print("unstorable metadata numbers: statuses \(statuses.sorted { $0.key < $1.key }); "
              + "database errors \(try series("wallet_db_errors_total{kind=\"sqlstate"))")
        // Nothing reached a writer: no batch ran, none failed.
        #expect(try series("wallet_batch_operations_count") == batchesBefore)
        #expect(try series("wallet_db_errors_total") == errorsBefore)
        #expect(try service.count("SELECT count(*) FROM wallet.entries") == 1)

        // What PostgreSQL can store is stored, through debits and holds alike.
        for (index, literal) in storable.enumerated() {
            #expect(try post("/v1/debits", metadata: #"{"x":\#(literal)}"#, key: "ok-\(index)").status == 201, "\(literal)")
            #expect(try post("/v1/holds", metadata: #"{"x":\#(literal)}"#, key: "ok-hold-\(index)").status == 201,
                    "\(literal)")
        }
        #expect(try service.count("""
            SELECT count(*) FROM wallet.entries WHERE kind = 'debit' AND metadata -> 'metadata' ? 'x'
            """) == storable.count)
        #expect(try service.count("SELECT count(*) FROM wallet.holds WHERE metadata ? 'x'") == storable.count)
        #expect(try service.violations() == [])
    }

    @Test func malformedJSONIs400() throws {
        let service = try TestService()
        defer { service.stop() }
        let deep = String(repeating: "[", count: 40) + String(repeating: "]", count: 40)
        let bodies: [[UInt8]] = [
            Array(#"{"user_id":"a","user_id":"b","amount":1}"#.utf8),  // duplicate keys
            Array(#"{"user_id":"a","amount":1,"metadata":\#(deep)}"#.utf8),  // deeper than 32
            [0x7B, 0x22, 0xC3, 0x28, 0x22, 0x3A, 0x31, 0x7D],  // invalid UTF-8
            Array(#"{"user_id":"a","amount":1} trailing"#.utf8),
            Array("".utf8),
        ]
        for body in bodies {
            let client = try service.client()
            defer { client.close() }
            let response = try client.request(method: "POST", path: "/v1/debits", headers: [
                ("Authorization", "Bearer \(service.gameServerKey)"), ("Content-Type", "application/json"),
                ("Idempotency-Key", "k"),
            ], body: body)
            #expect(response.status == 400)
            #expect(try response.json()["code"] == "malformed_json")
        }
    }

    @Test func idempotencyKeysMustBePrintableASCII() throws {
        let service = try TestService()
        defer { service.stop() }
        for key in [String(repeating: "k", count: 256), "tab\there"] {
            let response = try service.request("POST", "/v1/debits", key: service.gameServerKey,
                                               json: #"{"user_id":"a","amount":1}"#, headers: [("Idempotency-Key", key)])
            #expect(response.status == 400)
            #expect(try response.json()["code"] == "idempotency_key_required")
        }
    }

    @Test func slowClientsDoNotBlockOthers() throws {
        let service = try TestService()
        defer { service.stop() }
        // 50 clients each send half a request and stall.
        var stalled: [HTTPTestClient] = []
        for index in 0..<50 {
            let client = try service.client()
            try client.send("POST /v1/debits HTTP/1.1\r\nHost: x\r\nContent-Length: 40\r\nX-Slow: \(index)\r\n")
            stalled.append(client)
        }
        defer { stalled.forEach { $0.close() } }
        let started = Date()
        let response = try service.request("GET", "/v1/wallets/someone", key: service.gameServerKey)
        let delay = Date().timeIntervalSince(started)
        print("normal request beside 50 stalled clients answered in \(Int(delay * 1000)) ms")
        #expect(response.status == 200)
        #expect(delay < 2)
    }

    @Test func generatedMalformedBodiesNeverFindA5xx() throws {
        let service = try TestService()
        defer { service.stop() }
        let connection = try Connection(options: service.database)
        try connection.query("SELECT * FROM wallet.grant_coins('fuzz-rich', 1000000, 'coin', 'setup', 'tests')")
        var random = SplitMix64(seed: 0x5EED_F00D)
        let seeds: [(path: String, key: String, body: String)] = [
            ("/v1/credits", service.appBackendKey, #"{"user_id":"fuzz-1","flow_no":"fz-1","product_id":"guodong600","quantity":1}"#),
            ("/v1/debits", service.gameServerKey, #"{"user_id":"fuzz-rich","amount":3,"currency":"coin","reason":"r","metadata":{"a":[1,2]}}"#),
            ("/v1/appstore/notifications", "", #"{"signedPayload":"eyJhbGciOiJFUzI1NiJ9.eyJ4IjoxfQ.c2ln"}"#),
        ]
        var acknowledged = 0
        var statuses: [Int: Int] = [:]
        for seed in seeds {
            let client = try service.client()
            defer { client.close() }
            for round in 0..<1_000 {
                let body = mutate(Array(seed.body.utf8), &random)
                var headers: [(name: String, value: String)] = [("Content-Type", "application/json"),
                                                                 ("Idempotency-Key", "fuzz-\(round)")]
                if !seed.key.isEmpty { headers.append(("Authorization", "Bearer \(seed.key)")) }
                let response: HTTPTestResponse
                do {
                    response = try client.request(method: "POST", path: seed.path, headers: headers, body: body)
                } catch {
                    Issue.record("\(seed.path) round \(round): connection failed: \(error)")
                    break
                }
                statuses[response.status, default: 0] += 1
                #expect(response.status < 500, "\(seed.path) round \(round): \(response.text)")
                if response.status == 201 { acknowledged += 1 }
                if response.header("Connection")?.lowercased() == "close" { break }
            }
        }
        print("fuzz statuses: \(statuses.sorted { $0.key < $1.key })")
        // Each ledger entry beyond the setup grant is an acknowledged request.
        #expect(try service.count("SELECT count(*) FROM wallet.entries") == 1 + acknowledged)
        #expect(try service.violations() == [])
    }
}

/// One malformed variant of `body`: truncated, bit-flipped, spliced with
/// hostile fragments, or with values swapped for awkward ones.
func mutate(_ body: [UInt8], _ random: inout SplitMix64) -> [UInt8] {
    let fragments = ["null", "-0", "1e309", "99999999999999999999", "\"\\u0000\"", "\"\\ud800\"", "[[[[[[", "{}",
                     "\"'; DROP TABLE wallet.entries; --\"", "1.5", "\"\u{202E}\"", "true", "-9223372036854775809",
                     String(repeating: "9", count: 400), "\"" + String(repeating: "x", count: 300) + "\""]
    var bytes = body
    switch random.below(7) {
    case 0:
        bytes = Array(bytes.prefix(random.below(max(bytes.count, 1))))
    case 1:
        for _ in 0...random.below(4) where !bytes.isEmpty {
            bytes[random.below(bytes.count)] ^= UInt8(1 << random.below(8))
        }
    case 2:
        let at = random.below(bytes.count + 1)
        bytes.insert(contentsOf: Array(fragments[random.below(fragments.count)].utf8), at: at)
    case 3:
        // Replace one value (after a colon) with a hostile fragment.
        let colons = bytes.indices.filter { bytes[$0] == UInt8(ascii: ":") }
        if let colon = colons.isEmpty ? nil : colons[random.below(colons.count)] {
            var end = colon + 1
            while end < bytes.count, bytes[end] != UInt8(ascii: ","), bytes[end] != UInt8(ascii: "}") { end += 1 }
            bytes.replaceSubrange((colon + 1)..<end, with: Array(fragments[random.below(fragments.count)].utf8))
        }
    case 4:
        bytes = (0..<random.below(64)).map { _ in UInt8(truncatingIfNeeded: random.next()) }
    case 5:
        bytes = Array(String(repeating: "{\"a\":", count: 20 + random.below(30)).utf8) + [0x31]
            + Array(String(repeating: "}", count: 20).utf8)
    default:
        let at = random.below(bytes.count + 1)
        bytes.insert(contentsOf: [0xFF, 0xFE, 0xC0, 0x80, 0xED, 0xA0, 0x80][0..<(1 + random.below(7))], at: at)
    }
    return bytes
}
