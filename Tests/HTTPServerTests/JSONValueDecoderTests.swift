import Foundation
import HTTPServer
import JSON
import TestSupport
import Testing

@Suite struct JSONValueDecoderTests {
    private func decode<T: Decodable>(_ type: T.Type, _ json: String) throws -> T {
        try JSONValueDecoder().decode(type, from: JSONParser.parse(Array(json.utf8)))
    }

    private struct Wrapped<T: Decodable>: Decodable {
        var value: T
    }

    @Test func integersAcceptOnlyIntegerLiteralsThatFit() throws {
        #expect(try decode(Int.self, "42") == 42)
        #expect(try decode(Int64.self, "-9223372036854775808") == Int64.min)
        #expect(try decode(UInt64.self, "18446744073709551615") == UInt64.max)
        #expect(try decode(Int.self, "-0") == 0)
        #expect(try decode(UInt8.self, "-0") == 0)
        #expect(try decode(Int32.self, "2147483647") == Int32.max)

        let refused: [(String, any Decodable.Type)] = [
            ("5.0", Int.self), ("1e3", Int.self), ("1E0", Int64.self), ("0.0", Int.self),
            ("\"5\"", Int.self), ("true", Int.self), ("[]", Int.self), ("{}", Int.self), ("null", Int.self),
            ("2147483648", Int32.self), ("-1", UInt.self), ("-1", UInt64.self), ("256", UInt8.self),
            ("9223372036854775808", Int64.self), ("-9223372036854775809", Int.self),
            ("18446744073709551616", UInt64.self),
        ]
        for (json, type) in refused {
            #expect(throws: DecodingError.self, "\(json) as \(type)") { _ = try decode(type, json) }
        }
    }

    @Test func noCoercionBetweenKinds() throws {
        #expect(throws: DecodingError.self) { _ = try decode(String.self, "5") }
        #expect(throws: DecodingError.self) { _ = try decode(String.self, "null") }
        #expect(throws: DecodingError.self) { _ = try decode(Bool.self, "1") }
        #expect(throws: DecodingError.self) { _ = try decode(Bool.self, "\"true\"") }
        #expect(throws: DecodingError.self) { _ = try decode(Double.self, "\"1.5\"") }
        #expect(try decode(String.self, "\"5\"") == "5")
        #expect(try decode(Bool.self, "false") == false)
    }

    @Test func floatingPointAcceptsAnyFiniteNumber() throws {
        #expect(try decode(Double.self, "1") == 1)
        #expect(try decode(Double.self, "-2.5e-1") == -0.25)
        #expect(try decode(Float.self, "0.5") == 0.5)
        #expect(throws: DecodingError.self) { _ = try decode(Double.self, "1e400") }
        #expect(throws: DecodingError.self) { _ = try decode(Float.self, "1e39") }
        #expect(try decode(Decimal.self, "0.1") == Decimal(string: "0.1"))
    }

    @Test func errorsCarryTheCodingPath() throws {
        struct Line: Decodable { var amount: Int64 }
        struct Order: Decodable { var lines: [Line] }
        do {
            _ = try decode(Order.self, #"{"lines": [{"amount": 1}, {"amount": 2.5}]}"#)
            Issue.record("fractional amount accepted")
        } catch let DecodingError.typeMismatch(_, context) {
            #expect(context.codingPath.map(\.stringValue) == ["lines", "1", "amount"])
            #expect(context.debugDescription == "expected an integer, found 2.5")
        }
        do {
            _ = try decode(Order.self, #"{"lines": [{}]}"#)
            Issue.record("missing amount accepted")
        } catch let DecodingError.keyNotFound(key, context) {
            #expect(key.stringValue == "amount")
            #expect(context.codingPath.map(\.stringValue) == ["lines", "0"])
        }
        do {
            _ = try decode(Order.self, #"{"lines": [{"amount": null}]}"#)
            Issue.record("null amount accepted")
        } catch let DecodingError.valueNotFound(_, context) {
            #expect(context.codingPath.map(\.stringValue) == ["lines", "0", "amount"])
        }
        do {
            _ = try decode(Wrapped<UInt8>.self, #"{"value": 300}"#)
            Issue.record("out-of-range value accepted")
        } catch let DecodingError.dataCorrupted(context) {
            #expect(context.codingPath.map(\.stringValue) == ["value"])
            #expect(context.debugDescription == "integer 300 is outside 0...255")
        }
    }

    @Test func optionalsAndNestedValues() throws {
        struct Body: Decodable {
            var note: String?
            var tags: [String]
            var meta: JSONValue
            var limit: Int?
        }
        let body = try decode(Body.self, #"{"tags": ["a", "b"], "meta": {"x": 1.50, "y": [null]}, "limit": null}"#)
        #expect(body.note == nil)
        #expect(body.limit == nil)
        #expect(body.tags == ["a", "b"])
        #expect(body.meta == ["x": .number("1.50"), "y": [nil]])
    }

    @Test func errorsFromATypesOwnInitializerPassThrough() throws {
        struct Refusal: Error, Equatable { var reason: String }
        struct Positive: Decodable {
            init(from decoder: any Decoder) throws {
                let value = try decoder.singleValueContainer().decode(Int.self)
                if value <= 0 { throw Refusal(reason: "not positive") }
            }
        }
        #expect(throws: Refusal(reason: "not positive")) { _ = try decode(Wrapped<Positive>.self, #"{"value": -3}"#) }
    }

    @Test func enumsWithRawValuesRefuseUnknownCases() throws {
        enum Kind: String, Decodable { case credit, debit }
        #expect(try decode(Kind.self, "\"debit\"") == .debit)
        #expect(throws: DecodingError.self) { _ = try decode(Kind.self, "\"refund\"") }
    }

    @Test func jsonValueRoundTripsThroughFoundation() throws {
        let value: JSONValue = ["a": [1, "two", true, nil], "b": ["c": .number("-12")]]
        let data = try JSONEncoder().encode(value)
        #expect(try JSONDecoder().decode(JSONValue.self, from: data) == value)
    }
}
