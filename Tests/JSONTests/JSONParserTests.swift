import JSON
import Testing

@Suite struct JSONParserTests {
    static let accepted: [(input: String, expected: JSONValue)] = [
        ("null", .null),
        ("true", true),
        (" false ", false),
        ("0", .number("0")),
        ("-0", .number("-0")),
        ("5.0", .number("5.0")),
        ("1e3", .number("1e3")),
        ("-12.5E-3", .number("-12.5E-3")),
        ("123456789012345678901234567890", .number("123456789012345678901234567890")),
        ("\"\"", ""),
        ("\"a\\\"b\\\\c\\/d\\b\\f\\n\\r\\t\"", "a\"b\\c/d\u{08}\u{0C}\n\r\t"),
        ("\"\\u00e9\\u20AC\"", "é€"),
        ("\"\\ud83d\\ude00\"", "😀"),
        ("\"\\u0000\"", "\u{0}"),
        ("\"é€😀\"", "é€😀"),
        ("[]", []),
        ("{}", [:]),
        ("[1, [2, [3]]]", [1, [2, [3]]]),
        ("\t{\"b\": 1, \"a\": [true, null]}\r\n", ["b": 1, "a": [true, nil]]),
        ("{\"a\": {\"a\": 1}}", ["a": ["a": 1]]),
    ]

    @Test(arguments: accepted)
    func accepts(_ input: String, _ expected: JSONValue) throws {
        #expect(try JSONParser.parse(Array(input.utf8)) == expected)
    }

    static let rejected: [(name: String, bytes: [UInt8])] = [
        ("empty", []),
        ("whitespace only", Array("  ".utf8)),
        ("leading BOM", [0xEF, 0xBB, 0xBF] + Array("{}".utf8)),
        ("trailing garbage", Array("{} x".utf8)),
        ("two values", Array("1 2".utf8)),
        ("trailing comma in array", Array("[1,]".utf8)),
        ("trailing comma in object", Array("{\"a\":1,}".utf8)),
        ("single quotes", Array("['a']".utf8)),
        ("unquoted key", Array("{a:1}".utf8)),
        ("duplicate key", Array("{\"a\":1,\"a\":2}".utf8)),
        ("duplicate key among many", Array(("{" + (0..<40).map { "\"k\($0)\":0," }.joined() + "\"k7\":1}").utf8)),
        ("nested duplicate key", Array("{\"x\":{\"a\":1,\"b\":2,\"a\":3}}".utf8)),
        ("leading zero", Array("01".utf8)),
        ("leading plus", Array("+1".utf8)),
        ("bare minus", Array("-".utf8)),
        ("fraction without digits", Array("1.".utf8)),
        ("leading dot", Array(".5".utf8)),
        ("exponent without digits", Array("1e".utf8)),
        ("NaN", Array("NaN".utf8)),
        ("Infinity", Array("Infinity".utf8)),
        ("hex number", Array("0x10".utf8)),
        ("truncated literal", Array("tru".utf8)),
        ("capitalised literal", Array("True".utf8)),
        ("unterminated string", Array("\"abc".utf8)),
        ("raw newline in string", Array("\"a\nb\"".utf8)),
        ("raw tab in string", Array("\"a\tb\"".utf8)),
        ("raw NUL in string", [0x22, 0x00, 0x22]),
        ("invalid escape", Array("\"\\x41\"".utf8)),
        ("short unicode escape", Array("\"\\u12\"".utf8)),
        ("lone high surrogate", Array("\"\\ud800\"".utf8)),
        ("high surrogate then letter", Array("\"\\ud800x\"".utf8)),
        ("high surrogate then non-low escape", Array("\"\\ud800\\u0041\"".utf8)),
        ("lone low surrogate", Array("\"\\udc00\"".utf8)),
        ("overlong slash C0 AF", [0x22, 0xC0, 0xAF, 0x22]),
        ("overlong NUL C0 80", [0x22, 0xC0, 0x80, 0x22]),
        ("overlong three-byte E0 80 AF", [0x22, 0xE0, 0x80, 0xAF, 0x22]),
        ("overlong four-byte F0 80 80 AF", [0x22, 0xF0, 0x80, 0x80, 0xAF, 0x22]),
        ("UTF-8 encoded surrogate ED A0 80", [0x22, 0xED, 0xA0, 0x80, 0x22]),
        ("beyond U+10FFFF F4 90 80 80", [0x22, 0xF4, 0x90, 0x80, 0x80, 0x22]),
        ("invalid lead byte F5", [0x22, 0xF5, 0x80, 0x80, 0x80, 0x22]),
        ("lone continuation byte", [0x22, 0x80, 0x22]),
        ("truncated sequence", [0x22, 0xE2, 0x82, 0x22]),
        ("Latin-1 byte", [0x22, 0xE9, 0x22]),
        ("non-ASCII outside string", [0xC3, 0xA9]),
        ("unclosed array", Array("[1, 2".utf8)),
        ("unclosed object", Array("{\"a\": 1".utf8)),
        ("missing colon", Array("{\"a\" 1}".utf8)),
        ("missing value", Array("{\"a\":}".utf8)),
        ("comment", Array("{} // no".utf8)),
        ("mismatched brackets", Array("[1}".utf8)),
        ("vertical tab whitespace", Array("\u{0B}1".utf8)),
    ]

    @Test(arguments: rejected)
    func rejects(_ name: String, _ bytes: [UInt8]) {
        #expect(throws: JSONSyntaxError.self, "\(name) must be rejected") {
            _ = try JSONParser.parse(bytes)
        }
    }

    @Test func depthLimitIsExact() throws {
        let allowed = String(repeating: "[", count: 32) + String(repeating: "]", count: 32)
        let tooDeep = String(repeating: "[", count: 33) + String(repeating: "]", count: 33)
        #expect(throws: Never.self) { _ = try JSONParser.parse(Array(allowed.utf8)) }
        #expect(throws: JSONSyntaxError.self) { _ = try JSONParser.parse(Array(tooDeep.utf8)) }
        let objects = String(repeating: "{\"a\":", count: 4) + "1" + String(repeating: "}", count: 4)
        #expect(throws: JSONSyntaxError.self) { _ = try JSONParser.parse(Array(objects.utf8), maxDepth: 3) }
        #expect(throws: Never.self) { _ = try JSONParser.parse(Array(objects.utf8), maxDepth: 4) }
    }

    @Test func deepInputFailsWithoutExhaustingTheStack() {
        let hostile = [UInt8](repeating: UInt8(ascii: "["), count: 100_000)
        #expect(throws: JSONSyntaxError.self) { _ = try JSONParser.parse(hostile, maxDepth: 200_000) }
    }

    @Test func errorsNameTheByteOffset() {
        do {
            _ = try JSONParser.parse(Array("{\"a\":1,\"a\":2}".utf8))
            Issue.record("duplicate key accepted")
        } catch {
            #expect(error.offset == 7)
            #expect(error.detail == "duplicate object key \"a\" at byte offset 7")
        }
        do {
            _ = try JSONParser.parse([0x22, 0x61, 0xC0, 0xAF, 0x22])
            Issue.record("overlong form accepted")
        } catch {
            #expect(error.offset == 2)
            #expect(error.detail.contains("invalid UTF-8"))
        }
    }

    @Test func keepsMemberOrderAndSerializesCompactly() throws {
        let value = try JSONParser.parse(Array("{ \"z\" : 1 , \"a\" : [ \"x/y\", -0.5e1 ] }".utf8))
        #expect(String(decoding: value.serialized(), as: UTF8.self) == "{\"z\":1,\"a\":[\"x/y\",-0.5e1]}")
    }

    @Test func serializationEscapesWhatJSONRequires() throws {
        let value: JSONValue = ["k": .string("q\"b\\n\n\u{01}é")]
        let text = String(decoding: value.serialized(), as: UTF8.self)
        #expect(text == "{\"k\":\"q\\\"b\\\\n\\n\\u0001é\"}")
        #expect(try JSONParser.parse(value.serialized()) == value)
    }

    @Test func acceptsNonContiguousCollections() throws {
        let bytes = Array("[1,2]".utf8).lazy.map { $0 }
        #expect(try JSONParser.parse(bytes) == [1, 2])
    }
}
