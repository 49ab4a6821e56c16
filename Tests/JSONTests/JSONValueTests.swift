import JSON
import Testing

/// Reading parsed values, their canonical form, and the indented layout.
@Suite struct JSONValueTests {
    private func parse(_ text: String) throws -> JSONValue {
        try JSONParser.parse(Array(text.utf8))
    }

    @Test func integersAreIntegerLiteralsWithinTheType() throws {
        #expect(try parse("42").integer(as: Int.self) == 42)
        #expect(try parse("-9223372036854775808").integer(as: Int64.self) == Int64.min)
        #expect(try parse("-0").integer(as: Int.self) == 0)
        for text in ["4.0", "1e3", "\"4\"", "true", "null", "9223372036854775808", "[]"] {
            #expect(try parse(text).integer(as: Int64.self) == nil, "\(text)")
        }
        #expect(try parse("-1").integer(as: UInt.self) == nil)
        #expect(try parse("256").integer(as: UInt8.self) == nil)
    }

    @Test func doublesAreAnyNumberThatStaysFinite() throws {
        #expect(try parse("1.5e3").doubleValue == 1500)
        #expect(try parse("-2").doubleValue == -2)
        #expect(try parse("1e400").doubleValue == nil)
        #expect(try parse("true").doubleValue == nil)
        #expect(try parse("\"1\"").doubleValue == nil)
    }

    @Test func eachKindIsReadOnlyAsItself() throws {
        let value = try parse(#"{"s":"x","b":false,"n":1,"a":["p","q"],"m":["p",1],"o":{}}"#)
        #expect(value["s"]?.stringValue == "x")
        #expect(value["n"]?.stringValue == nil)
        #expect(value["b"]?.boolValue == false)
        #expect(value["n"]?.boolValue == nil)
        #expect(value["a"]?.arrayValue == ["p", "q"])
        #expect(value["a"]?.stringArrayValue == ["p", "q"])
        #expect(value["m"]?.stringArrayValue == nil)
        #expect(value["o"]?.objectMembers?.isEmpty == true)
        #expect(value["a"]?.objectMembers == nil)
        #expect(value.objectMembers?.map(\.key) == ["s", "b", "n", "a", "m", "o"])
    }

    @Test func canonicalFormSortsKeysByTheirBytesAtEveryDepth() throws {
        let value = try parse(#"{"b":1,"é":[{"z":1,"a":2}],"B":{"y":null,"x":true},"a":"1.0"}"#)
        #expect(value.canonicalized().serializedText() == #"{"B":{"x":true,"y":null},"a":"1.0","b":1,"é":[{"a":2,"z":1}]}"#)
    }

    @Test func theIndentedLayoutPutsEachMemberOnALine() throws {
        let value = try parse(#"{"a":[1,{"b":"c\nd"}],"e":{},"f":[]}"#)
        let expected = """
            {
              "a" : [
                1,
                {
                  "b" : "c\\nd"
                }
              ],
              "e" : {},
              "f" : []
            }
            """
        #expect(String(decoding: value.serializedIndented(), as: UTF8.self) == expected)
        #expect(try JSONParser.parse(value.serializedIndented()) == value)
    }
}
