import AppStore
import Crypto
import Foundation
import HTTPServer
import JSON
import Testing
import TestSupport
@testable import ServiceAPI
import WalletCore

/// The parsers that face callers, fed thousands of broken inputs made from
/// valid ones with a fixed seed: truncated, bit-flipped, with bytes inserted
/// or deleted, duplicated past 1 MiB and nested deep. Nothing may crash,
/// every input ends as a value or a thrown error, whatever is accepted obeys
/// the rules, and no altered certificate verifies.
@Suite struct ParserFuzzTests {
    // MARK: JSON request bodies

    static let creditBodies = [
        #"{"user_id":"player-1","flow_no":"2000000123456789","product_id":"guodong600"}"#,
        #"{"user_id":"u:1@x.y-z_2","flow_no":"f.1:2@3-4_5","product_id":"guodong5000","quantity":10,"amount":50000}"#,
        #"{"user_id":"a","flow_no":"b","product_id":"c","signed_transaction":"eyJhbGciOiJFUzI1NiJ9.eyJ4IjoxfQ.c2ln"}"#,
        #"{"user_id":"a","flow_no":"b","product_id":"c","quantity":null,"receipt_data":"TUlJVDNRWUpLb1pJaHZjTkFRY0Nv"}"#,
        " {\r\n\t\"product_id\" : \"guodong1200\" , \"quantity\" : 1 , \"flow_no\" : \"9\" , \"user_id\" : \"Z\" }\n",
    ]

    static let debitBodies = [
        #"{"user_id":"player-1","amount":100}"#,
        #"{"user_id":"player-2","amount":1000000000000,"currency":"coin","reason":"sword \u00e9 \u2713","#
            + #""metadata":{"order":"o-1","items":[1,2.5,-3e2,true,false,null,{"k":"v"}]}}"#,
        #"{"user_id":"p","amount":1,"currency":"gem_2","reason":null,"metadata":{}}"#,
        #"{"metadata":{"s":"\"\\\/\b\f\n\r\t\u0041\ud83d\ude00","n":{"m":{"o":[[[]]]}}},"amount":42,"user_id":"q"}"#,
    ]

    static let jsonSeed: UInt64 = 0x5EED_0000_0000_1501
    static let jsonMutationCount = 5_200
    static let oversizedBytesMin = 1 << 20

    /// Tokens that mean something to a JSON parser, and bytes that are not UTF-8.
    static let hostileFragments: [[UInt8]] = [
        "\"", "\\", "{", "}", "[", "]", ",", ":", "-", "0", "-0", "1.0", "1e3", "1e999", "9223372036854775808",
        "1000000000001", "-1", String(repeating: "9", count: 400), "\\u0000", "\"\\u0000\"", "\"\\ud800\"",
        "\"\\udc00\"", "\\uZZZZ", "null", "true", "nul", " \t\r\n", "/*", "NaN", "Infinity",
    ].map { Array($0.utf8) }
        + [[0xC0, 0x80], [0xED, 0xA0, 0x80], [0xF4, 0x90, 0x80, 0x80], [0xEF, 0xBB, 0xBF], [0xFF], [0x00], [0x1F]]

    /// One broken variant of `base`.
    static func mutatedBody(_ base: [UInt8], _ random: inout SplitMix64) -> [UInt8] {
        guard !base.isEmpty else { return base }
        var bytes = base
        switch random.below(12) {
        case 0:  // truncate
            bytes = Array(bytes.prefix(random.below(bytes.count)))
        case 1:  // flip one to three bits
            for _ in 0...random.below(3) {
                bytes[random.below(bytes.count)] ^= UInt8(1) << UInt8(random.below(8))
            }
        case 2:  // insert random bytes
            let count = 1 + random.below(8)
            let noise = (0..<count).map { _ in UInt8(truncatingIfNeeded: random.next()) }
            bytes.insert(contentsOf: noise, at: random.below(bytes.count + 1))
        case 3, 4:  // insert a token that means something to the parser
            bytes.insert(contentsOf: hostileFragments[random.below(hostileFragments.count)], at: random.below(bytes.count + 1))
        case 5:  // delete a range
            let start = random.below(bytes.count)
            bytes.removeSubrange(start..<min(bytes.count, start + 1 + random.below(12)))
        case 6:  // duplicate a range elsewhere: repeated keys, doubled values
            let start = random.below(bytes.count)
            let range = Array(bytes[start..<min(bytes.count, start + 1 + random.below(24))])
            bytes.insert(contentsOf: range, at: random.below(bytes.count + 1))
        case 7:  // replace a number with an awkward one
            let digits = bytes.indices.filter { (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(bytes[$0]) }
            guard let at = digits.isEmpty ? nil : digits[random.below(digits.count)] else { break }
            var end = at
            while end < bytes.count, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(bytes[end]) { end += 1 }
            let numbers = ["0", "-0", "1", "-1", "1.0", "1e0", "10E-1", "1000000000000", "1000000000001",
                           "9223372036854775807", "9223372036854775808", "-9223372036854775809", "00", "0x10"]
            bytes.replaceSubrange(at..<end, with: Array(numbers[random.below(numbers.count)].utf8))
        case 8:  // change a quoted value into another kind
            let quotes = bytes.indices.filter { bytes[$0] == UInt8(ascii: ":") }
            guard let colon = quotes.isEmpty ? nil : quotes[random.below(quotes.count)] else { break }
            let kinds = ["null", "true", "[]", "{}", "\"\"", "[\"a\"]", "{\"a\":1}", "\"\(String(repeating: "x", count: 129))\""]
            bytes.insert(contentsOf: Array(kinds[random.below(kinds.count)].utf8) + Array(",".utf8), at: colon + 1)
        case 9:  // nest deep, around the whole body or in front of it
            let depth = [2, 30, 31, 32, 33, 64, 1_000, 100_000][random.below(8)]
            let (open, close): (String, String) = random.below(2) == 0 ? ("[", "]") : ("{\"a\":", "}")
            let closing = random.below(3) == 0 ? "" : String(repeating: close, count: depth)
            bytes = Array(String(repeating: open, count: depth).utf8) + bytes + Array(closing.utf8)
        case 10:  // nest deep inside metadata, where deep values are allowed up to the limit
            let depth = 25 + random.below(12)
            let value = String(repeating: "[", count: depth) + "1" + String(repeating: "]", count: depth)
            let text = String(decoding: bytes, as: UTF8.self)
            bytes = Array(text.replacingOccurrences(of: "\"amount\"", with: "\"metadata\":{\"deep\":\(value)},\"amount\"").utf8)
        default:  // two of the above
            bytes = mutatedBody(mutatedBody(bytes, &random), &random)
        }
        return bytes
    }

    /// An input of at least 1 MiB, made from `base` in one of several ways.
    static func oversizedBody(_ base: [UInt8], _ random: inout SplitMix64) -> [UInt8] {
        let size = oversizedBytesMin + random.below(64 << 10)
        switch random.below(5) {
        case 0:  // the body duplicated until it is oversized
            var bytes: [UInt8] = []
            bytes.reserveCapacity(size + base.count)
            while bytes.count < size { bytes += base }
            return bytes
        case 1:  // one huge string, inside the first string after a colon
            guard let colon = base.firstIndex(of: UInt8(ascii: ":")),
                  let quote = base[colon...].firstIndex(of: UInt8(ascii: "\"")) else { return base }
            var bytes = base
            bytes.insert(contentsOf: Array(repeating: UInt8(ascii: "a"), count: size), at: quote + 1)
            return bytes
        case 2:  // a huge run of whitespace
            return Array(repeating: UInt8(ascii: " "), count: size) + base
        case 3:  // a huge array of small members inside metadata
            let elements = Array(repeating: "1", count: size / 2).joined(separator: ",")
            return Array(#"{"user_id":"p","amount":1,"metadata":{"a":[\#(elements)]}}"#.utf8)
        default:  // a huge object of distinct keys
            var text = #"{"user_id":"p","amount":1,"metadata":{"#
            var index = 0
            while text.utf8.count < size {
                if index > 0 { text += "," }
                text += "\"k\(index)\":\(index)"
                index += 1
            }
            return Array((text + "}}").utf8)
        }
    }

    struct JSONTally {
        var inputs = 0
        var oversized = 0
        var syntaxErrors = 0
        var creditsAccepted = 0
        var debitsAccepted = 0
        var refused = 0
        var failures: [String] = []

        mutating func fail(_ text: String) {
            if failures.count < 20 { failures.append(text) }
        }
    }

    @Test(.timeLimit(.minutes(2)))
    func requestBodiesSurviveMutation() throws {
        let credits = Self.creditBodies.map { Array($0.utf8) }
        let debits = Self.debitBodies.map { Array($0.utf8) }
        // The bases themselves decode, or the mutants would prove nothing.
        for body in credits {
            #expect(throws: Never.self) { try CreditBody(json: try JSONParser.parse(body)) }
        }
        for body in debits {
            #expect(throws: Never.self) { try DebitBody(json: try JSONParser.parse(body)) }
        }

        var random = SplitMix64(seed: Self.jsonSeed)
        var tally = JSONTally()
        let bases = credits + debits
        for index in 0..<Self.jsonMutationCount {
            let base = bases[index % bases.count]
            // One input in a hundred is oversized: a megabyte takes a while
            // to build and parse in a debug build.
            let input = index % 100 == 99 ? Self.oversizedBody(base, &random) : Self.mutatedBody(base, &random)
            if input.count >= Self.oversizedBytesMin { tally.oversized += 1 }
            Self.check(input, index: index, into: &tally)
        }

        print("json fuzz: \(tally.inputs) inputs (\(tally.oversized) of 1 MiB or more): \(tally.syntaxErrors) syntax errors, "
              + "\(tally.creditsAccepted) credit and \(tally.debitsAccepted) debit bodies accepted, \(tally.refused) refused")
        #expect(tally.failures.isEmpty, "\(tally.failures.joined(separator: "\n"))")
        #expect(tally.inputs >= 5_000)
        #expect(tally.oversized >= 50)
        // The mutants reach every stage: syntax, validation and acceptance.
        #expect(tally.syntaxErrors > 1_000)
        #expect(tally.refused > 500)
        #expect(tally.creditsAccepted > 50)
        #expect(tally.debitsAccepted > 50)
    }

    /// Parses and decodes one input, checking everything that must hold.
    static func check(_ input: [UInt8], index: Int, into tally: inout JSONTally) {
        tally.inputs += 1
        let value: JSONValue
        do {
            value = try JSONParser.parse(input)
        } catch {
            tally.syntaxErrors += 1
            if !(0...input.count).contains(error.offset) {
                tally.fail("input \(index): syntax error offset \(error.offset) outside \(input.count) bytes")
            }
            return
        }
        // What the parser accepts, its writer writes back to the same value.
        if (try? JSONParser.parse(value.serialized())) != value {
            tally.fail("input \(index): does not survive serialization")
        }
        for (kind, decode) in [("credit", decodeCredit), ("debit", decodeDebit)] {
            do {
                if let violation = try decode(value) {
                    tally.fail("input \(index): accepted \(violation): \(String(decoding: input.prefix(300), as: UTF8.self))")
                } else if kind == "credit" {
                    tally.creditsAccepted += 1
                } else {
                    tally.debitsAccepted += 1
                }
            } catch is WalletError {
                tally.refused += 1
            } catch {
                tally.fail("input \(index): decoding a \(kind) threw \(type(of: error)), not a WalletError")
            }
        }
    }

    /// Decodes a credit body and returns the rule it breaks, if any.
    static func decodeCredit(_ value: JSONValue) throws -> String? {
        let body = try CreditBody(json: value)
        guard case .object(let members) = value,
              members.allSatisfy({ CreditBody.members.contains($0.key) }) else { return "a credit with unknown members" }
        // Only a Google Play purchase token lets the flowNO be left out.
        guard value["user_id"] == .string(body.userID.rawValue),
              value["flow_no"] == body.flowNo.map({ .string($0.rawValue) }),
              body.flowNo != nil || body.googlePurchaseToken != nil,
              value["product_id"] == .string(body.productID.rawValue) else { return "a credit with altered identifiers" }
        if let quantity = body.quantity {
            guard Quantity.range.contains(quantity.value), value["quantity"] == JSONValue(quantity.value) else {
                return "quantity \(quantity.value)"
            }
        }
        if let amount = body.claimedAmount {
            guard (1...Amount.maximum).contains(amount), value["amount"] == JSONValue(amount) else { return "amount \(amount)" }
        }
        if let jws = body.signedTransaction, !(1...65_536).contains(jws.utf8.count) {
            return "a signed_transaction of \(jws.utf8.count) bytes"
        }
        if let receipt = body.receiptData, !(1...(512 << 10)).contains(receipt.utf8.count) {
            return "receipt_data of \(receipt.utf8.count) bytes"
        }
        if body.signedTransaction != nil && body.receiptData != nil { return "both kinds of App Store evidence" }
        return nil
    }

    /// Decodes a debit body and returns the rule it breaks, if any.
    static func decodeDebit(_ value: JSONValue) throws -> String? {
        let body = try DebitBody(json: value)
        guard case .object(let members) = value,
              members.allSatisfy({ DebitBody.members.contains($0.key) }) else { return "a debit with unknown members" }
        guard (1...Amount.maximum).contains(body.amount.value), value["amount"] == JSONValue(body.amount.value) else {
            return "amount \(body.amount.value)"
        }
        guard value["user_id"] == .string(body.userID.rawValue) else { return "an altered user_id" }
        let currency = value["currency"] ?? .null
        guard currency == .string(body.currency.rawValue) || (currency == .null && body.currency == .coin) else {
            return "currency \(body.currency)"
        }
        if let reason = body.reason, reason.count > DebitBody.reasonCharactersMax || reason.unicodeScalars.contains("\0") {
            return "a reason of \(reason.count) characters"
        }
        if let metadata = body.metadata {
            guard case .object = metadata, !metadata.containsNUL,
                  metadata.canonicalBytes().count <= DebitBody.metadataBytesMax else { return "metadata outside the rules" }
        }
        // The idempotency hash's input is computed for every accepted debit.
        guard body.canonicalText.starts(with: Array("POST /v1/debits\n".utf8)) else { return "a canonical text" }
        return nil
    }

    // MARK: X.509

    /// One certificate chain from a real App Store token, and when it was valid.
    struct Chain {
        var name: String
        var leaf: [UInt8]
        var intermediate: [UInt8]
        var root: [UInt8]
        var signedDate: Date
    }

    static let vectorsDirectory = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("AppStoreTests/Vectors")

    /// Every `x5c` of the vectors, as DER, with the real chains apart.
    static func vectorCertificates() throws -> (chains: [Chain], others: [[UInt8]]) {
        let names = try FileManager.default.contentsOfDirectory(atPath: vectorsDirectory.path)
            .filter { $0.hasSuffix(".json") }.sorted()
        var chains: [Chain] = []
        var others: [[UInt8]] = []
        for name in names {
            let data = try Data(contentsOf: vectorsDirectory.appendingPathComponent(name))
            let vector = try #require(try JSONSerialization.jsonObject(with: data) as? [String: Any])
            let jws = try #require(vector["jws"] as? String)
            let header = try #require(Base64URL.decode(String(jws.prefix { $0 != "." })))
            let object = try #require(try JSONSerialization.jsonObject(with: Data(header)) as? [String: Any])
            let certificates = try (object["x5c"] as? [String] ?? []).map { try #require(Base64.decode($0)) }
            if name.hasPrefix("real-"), certificates.count == 3, let milliseconds = vector["signed_date_ms"] as? NSNumber {
                if !chains.contains(where: { $0.leaf == certificates[0] }) {
                    chains.append(Chain(name: name, leaf: certificates[0], intermediate: certificates[1], root: certificates[2],
                                        signedDate: Date(timeIntervalSince1970: milliseconds.doubleValue / 1000)))
                }
            } else {
                others += certificates.filter { !others.contains($0) }
            }
        }
        return (chains, others)
    }

    static let derSeed: UInt64 = 0x5EED_0000_0000_0509

    /// One broken variant of a DER certificate.
    static func mutatedCertificate(_ der: [UInt8], other: [UInt8], _ random: inout SplitMix64) -> [UInt8] {
        var bytes = der
        switch random.below(11) {
        case 0:  // truncate
            bytes = Array(bytes.prefix(random.below(bytes.count)))
        case 1:  // flip one to three bits anywhere
            for _ in 0...random.below(3) {
                bytes[random.below(bytes.count)] ^= UInt8(1) << UInt8(random.below(8))
            }
        case 2:  // flip a bit in the signature, at the end
            bytes[bytes.count - 1 - random.below(min(80, bytes.count))] ^= UInt8(1) << UInt8(random.below(8))
        case 3:  // flip a bit among the outer headers, version and serial
            bytes[random.below(min(48, bytes.count))] ^= UInt8(1) << UInt8(random.below(8))
        case 4:  // insert random bytes
            let noise = (0...random.below(8)).map { _ in UInt8(truncatingIfNeeded: random.next()) }
            bytes.insert(contentsOf: noise, at: random.below(bytes.count + 1))
        case 5:  // delete a range
            let start = random.below(bytes.count)
            bytes.removeSubrange(start..<min(bytes.count, start + 1 + random.below(16)))
        case 6:  // trailing bytes, or the certificate twice
            bytes += random.below(2) == 0 ? der : (0...random.below(32)).map { _ in UInt8(truncatingIfNeeded: random.next()) }
        case 7:  // oversized: up to the limit, just past it, or far past it
            let sizes = [Certificate.derBytesMax, Certificate.derBytesMax + 1, 64 << 10, 1 << 20]
            let size = sizes[random.below(sizes.count)]
            bytes += Array(repeating: UInt8(truncatingIfNeeded: random.next()), count: max(0, size - bytes.count))
        case 8:  // a length that claims more, or less, than is there
            let headers = bytes.indices.dropLast(3).filter { bytes[$0] == 0x30 && bytes[$0 + 1] == 0x82 }
            guard let at = headers.isEmpty ? nil : headers[random.below(headers.count)] else { break }
            let lengths: [[UInt8]] = [[0x82, 0xFF, 0xFF], [0x82, 0x00, 0x00], [0x84, 0x7F, 0xFF, 0xFF, 0xFF],
                                      [0x80], [0x81, 0x01],
                                      [0x82, bytes[at + 2], bytes[at + 3] &+ 1], [0x82, bytes[at + 2], bytes[at + 3] &- 1]]
            bytes.replaceSubrange((at + 1)..<(at + 4), with: lengths[random.below(lengths.count)])
        case 9:  // a range copied over from the same offsets of another certificate
            let start = random.below(min(bytes.count, other.count))
            let end = min(min(bytes.count, other.count), start + 1 + random.below(64))
            bytes.replaceSubrange(start..<end, with: other[start..<end])
        default:  // a byte set to a boundary value
            bytes[random.below(bytes.count)] = [0x00, 0x01, 0x7F, 0x80, 0x81, 0xFF][random.below(6)]
        }
        return bytes
    }

    @Test(.timeLimit(.minutes(2)))
    func alteredCertificatesNeverVerify() throws {
        let (chains, others) = try Self.vectorCertificates()
        try #require(chains.count >= 3, "the real vectors hold three distinct leaves")
        let roots = VerifierConfiguration.defaultRoots
        // The originals parse and verify, or the variants would prove nothing.
        for chain in chains {
            let leaf = try Certificate(der: chain.leaf)
            let intermediate = try Certificate(der: chain.intermediate)
            #expect(throws: Never.self, "\(chain.name)") {
                try verifyChain(leaf: leaf, intermediates: [intermediate], trustedRoots: roots, at: chain.signedDate)
            }
        }

        enum Role: CaseIterable { case leaf, intermediate, root, other }
        var random = SplitMix64(seed: Self.derSeed)
        var variants = 0
        var parsed = 0
        var verified = 0
        var forgeries: [String] = []
        for round in 0..<4_800 {
            let chain = chains[round % chains.count]
            let role = Role.allCases[(round / chains.count) % Role.allCases.count]
            let original: [UInt8]
            switch role {
            case .leaf: original = chain.leaf
            case .intermediate: original = chain.intermediate
            case .root: original = chain.root
            case .other: original = others.isEmpty ? chain.leaf : others[random.below(others.count)]
            }
            let other = role == .leaf ? chain.intermediate : chain.leaf
            let variant = Self.mutatedCertificate(original, other: other, &random)
            guard variant != original else { continue }
            variants += 1
            guard let certificate = try? Certificate(der: variant) else { continue }
            parsed += 1
            // Each variant goes where the verifier would take it from x5c.
            let accepted: Bool
            switch role {
            case .leaf:
                let intermediate = try Certificate(der: chain.intermediate)
                accepted = (try? verifyChain(leaf: certificate, intermediates: [intermediate], trustedRoots: roots,
                                             at: chain.signedDate)) != nil
            case .intermediate:
                let leaf = try Certificate(der: chain.leaf)
                let path = try? verifyChain(leaf: leaf, intermediates: [certificate], trustedRoots: roots, at: chain.signedDate)
                accepted = path.map { $0.count == 3 && $0[1] === certificate } ?? false
            case .root, .other:
                // Not a trust anchor: only a configured root is. Offered as
                // a leaf, an altered root must not pass for the real one.
                accepted = (try? verifyChain(leaf: certificate, intermediates: [], trustedRoots: roots,
                                             at: chain.signedDate)) != nil
            }
            if accepted {
                verified += 1
                forgeries.append("round \(round) (\(role)): \(variant.count) bytes, \(Base64.encode(variant).prefix(80))…")
            }
        }

        print("x509 fuzz: \(variants) variants, \(parsed) parsed, \(verified) verified")
        #expect(variants >= 4_000)
        #expect(forgeries.isEmpty, "altered certificates verified:\n\(forgeries.prefix(10).joined(separator: "\n"))")
        // Bit flips inside names, keys and signatures still parse as DER, so
        // the chain check, not only the parser, was put to work.
        #expect(parsed > 500)
    }

    /// A field is read only as its own JSON type: integers are digits with
    /// an optional minus sign and nothing else, and each bad field is named.
    @Test func fieldsAreReadOnlyAsTheirOwnJSONType() throws {
        func fields(_ json: String) -> [String] {
            do {
                _ = try DebitBody(json: try JSONParser.parse(Array(json.utf8)))
                return []
            } catch WalletError.validationFailed(let errors) {
                return errors.map(\.field)
            } catch {
                return ["unexpected \(error)"]
            }
        }
        #expect(fields(#"{"user_id":"u1","amount":5}"#) == [])
        #expect(fields(#"{"user_id":"u1","amount":1000000000000,"currency":null,"reason":null}"#) == [])
        for amount in ["5.0", "1e3", "\"5\"", "-0", "-5", "0", "true", "[5]", "1000000000001", "99999999999999999999"] {
            #expect(fields(#"{"user_id":"u1","amount":\#(amount)}"#) == ["amount"], "amount \(amount)")
        }
        #expect(fields(#"{"user_id":5,"amount":null}"#) == ["user_id", "amount"])
        #expect(fields(#"{"amount":5,"colour":"red"}"#) == ["colour", "user_id"])
        #expect(fields(#"[{"user_id":"u1","amount":5}]"#) == ["body"])
        #expect(fields(#"{"user_id":"u1","amount":5,"metadata":[1]}"#) == ["metadata"])
    }

}
