/// A JSON text that RFC 8259 does not allow, or that this API refuses
/// (duplicate keys, nesting deeper than the limit).
public struct JSONSyntaxError: Error, Sendable, Equatable, CustomStringConvertible {
    /// Byte offset into the input where the problem was found.
    public let offset: Int
    /// What is wrong, without the offset.
    public let reason: String

    public init(offset: Int, reason: String) {
        self.offset = offset
        self.reason = reason
    }

    /// A human sentence naming the problem and its byte offset; safe to show a client.
    public var detail: String { "\(reason) at byte offset \(offset)" }
    public var description: String { detail }
}

/// A strict RFC 8259 parser.
///
/// It refuses what Foundation's `JSONDecoder` lets through: duplicate object
/// keys, invalid UTF-8 (overlong forms, encoded surrogates, bytes past
/// U+10FFFF), lone surrogate escapes, raw control characters in strings, a
/// leading byte order mark, trailing data, and nesting past `maxDepth`.
/// Numbers are kept as literal text so integer fields can refuse `5.0` and `1e3`.
///
/// The parser is iterative: its stack is an array bounded by `maxDepth`.
public enum JSONParser {
    public static func parse(_ bytes: some Collection<UInt8>, maxDepth: Int = 32) throws(JSONSyntaxError) -> JSONValue {
        precondition(maxDepth >= 0, "maxDepth must not be negative")
        let contiguous = bytes.withContiguousStorageIfAvailable { buffer in
            Result { () throws(JSONSyntaxError) -> JSONValue in
                var parser = Parser(input: buffer, maxDepth: maxDepth)
                return try parser.parseDocument()
            }
        }
        if let contiguous { return try contiguous.get() }
        let copy = Array(bytes)
        let result = copy.withUnsafeBufferPointer { buffer in
            Result { () throws(JSONSyntaxError) -> JSONValue in
                var parser = Parser(input: buffer, maxDepth: maxDepth)
                return try parser.parseDocument()
            }
        }
        return try result.get()
    }
}

private struct Parser {
    let input: UnsafeBufferPointer<UInt8>
    let maxDepth: Int
    var index = 0

    init(input: UnsafeBufferPointer<UInt8>, maxDepth: Int) {
        self.input = input
        self.maxDepth = maxDepth
    }

    /// A container being filled. It is mutated in place on the stack so that
    /// appending never copies the elements gathered so far.
    private struct Frame {
        var isObject: Bool
        var elements: [JSONValue] = []
        var members: [(key: String, value: JSONValue)] = []
        /// The key whose value is being parsed (objects only).
        var key = ""
        /// Keys seen so far, filled once the object outgrows a linear scan.
        var seen = Set<String>()
    }

    /// Below this many members a linear scan finds duplicate keys faster than
    /// hashing; above it a set keeps the check O(1), so a large object cannot
    /// make parsing quadratic.
    private static let linearKeyScanMax = 16

    mutating func parseDocument() throws(JSONSyntaxError) -> JSONValue {
        if input.count >= 3, input[0] == 0xEF, input[1] == 0xBB, input[2] == 0xBF {
            throw JSONSyntaxError(offset: 0, reason: "byte order mark is not allowed")
        }
        var stack: [Frame] = []
        skipWhitespace()
        parsing: while true {
            // A value starts at `index`.
            var value: JSONValue
            guard index < input.count else { throw endOfInput() }
            switch input[index] {
            case UInt8(ascii: "{"):
                guard stack.count < maxDepth else { throw tooDeep() }
                index += 1
                skipWhitespace()
                if peek() == UInt8(ascii: "}") {
                    index += 1
                    value = .object([])
                } else {
                    var frame = Frame(isObject: true)
                    let key = try parseKey(in: &frame)
                    frame.key = key
                    stack.append(frame)
                    continue parsing
                }
            case UInt8(ascii: "["):
                guard stack.count < maxDepth else { throw tooDeep() }
                index += 1
                skipWhitespace()
                if peek() == UInt8(ascii: "]") {
                    index += 1
                    value = .array([])
                } else {
                    stack.append(Frame(isObject: false))
                    continue parsing
                }
            case UInt8(ascii: "\""):
                value = .string(try parseString())
            case UInt8(ascii: "t"):
                try expectLiteral("true")
                value = .bool(true)
            case UInt8(ascii: "f"):
                try expectLiteral("false")
                value = .bool(false)
            case UInt8(ascii: "n"):
                try expectLiteral("null")
                value = .null
            case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"):
                value = .number(try parseNumber())
            default:
                throw unexpected("expected a value")
            }

            // A value is complete: hand it to the enclosing container, closing
            // as many containers as the input closes.
            while true {
                skipWhitespace()
                guard !stack.isEmpty else {
                    guard index == input.count else {
                        throw JSONSyntaxError(offset: index, reason: "unexpected data after the JSON value")
                    }
                    return value
                }
                let top = stack.count - 1
                if stack[top].isObject {
                    stack[top].members.append((stack[top].key, value))
                    switch peek() {
                    case UInt8(ascii: ","):
                        index += 1
                        skipWhitespace()
                        let next = try parseKey(in: &stack[top])
                        stack[top].key = next
                        continue parsing
                    case UInt8(ascii: "}"):
                        index += 1
                        value = .object(stack.removeLast().members)
                    default:
                        throw unexpected("expected ',' or '}' in object")
                    }
                } else {
                    stack[top].elements.append(value)
                    switch peek() {
                    case UInt8(ascii: ","):
                        index += 1
                        skipWhitespace()
                        continue parsing
                    case UInt8(ascii: "]"):
                        index += 1
                        value = .array(stack.removeLast().elements)
                    default:
                        throw unexpected("expected ',' or ']' in array")
                    }
                }
            }
        }
    }

    /// Parses `"key" :` for the object in `frame`, refusing a key it
    /// already has, and leaves `index` at the member's value.
    private mutating func parseKey(in frame: inout Frame) throws(JSONSyntaxError) -> String {
        guard peek() == UInt8(ascii: "\"") else { throw unexpected("expected a string key") }
        let keyOffset = index
        let key = try parseString()
        let duplicate: Bool
        if frame.members.count < Self.linearKeyScanMax {
            duplicate = frame.members.contains { $0.key == key }
        } else {
            if frame.seen.isEmpty { frame.seen = Set(frame.members.map(\.key)) }
            duplicate = !frame.seen.insert(key).inserted
        }
        if duplicate {
            throw JSONSyntaxError(offset: keyOffset, reason: "duplicate object key \"\(Self.clipped(key))\"")
        }
        skipWhitespace()
        guard peek() == UInt8(ascii: ":") else { throw unexpected("expected ':' after object key") }
        index += 1
        skipWhitespace()
        return key
    }

    private mutating func parseString() throws(JSONSyntaxError) -> String {
        index += 1  // opening quote
        let start = index
        // Fast path: no escapes. Validate and find the closing quote.
        while index < input.count {
            let byte = input[index]
            if byte == UInt8(ascii: "\"") {
                let text = String(decoding: UnsafeBufferPointer(rebasing: input[start..<index]), as: UTF8.self)
                index += 1
                return text
            }
            if byte == UInt8(ascii: "\\") { break }
            try consumeStringByte(byte)
        }
        guard index < input.count else { throw endOfInput() }

        // Slow path: copy what was scanned, then decode escapes.
        var bytes = Array(UnsafeBufferPointer(rebasing: input[start..<index]))
        while index < input.count {
            let byte = input[index]
            if byte == UInt8(ascii: "\"") {
                index += 1
                return String(decoding: bytes, as: UTF8.self)
            }
            if byte == UInt8(ascii: "\\") {
                try parseEscape(into: &bytes)
            } else {
                let from = index
                try consumeStringByte(byte)
                bytes.append(contentsOf: UnsafeBufferPointer(rebasing: input[from..<index]))
            }
        }
        throw endOfInput()
    }

    /// Advances over one unescaped character starting with `byte`, checking
    /// that it is allowed in a string and is valid UTF-8.
    private mutating func consumeStringByte(_ byte: UInt8) throws(JSONSyntaxError) {
        if byte < 0x20 {
            throw JSONSyntaxError(offset: index, reason: "control character in string must be escaped")
        }
        if byte < 0x80 {
            index += 1
            return
        }
        // Well-formed UTF-8 (Unicode table 3-7). The second byte's range
        // depends on the lead byte; that is what rules out overlong forms,
        // UTF-16 surrogates (ED A0..BF) and code points past U+10FFFF.
        let count: Int
        var secondLow: UInt8 = 0x80
        var secondHigh: UInt8 = 0xBF
        switch byte {
        case 0xC2...0xDF: count = 2
        case 0xE0: count = 3; secondLow = 0xA0
        case 0xE1...0xEC, 0xEE...0xEF: count = 3
        case 0xED: count = 3; secondHigh = 0x9F
        case 0xF0: count = 4; secondLow = 0x90
        case 0xF1...0xF3: count = 4
        case 0xF4: count = 4; secondHigh = 0x8F
        default: throw invalidUTF8()
        }
        guard index + count <= input.count else {
            // A truncated sequence at the end of input is still invalid UTF-8.
            throw invalidUTF8()
        }
        let second = input[index + 1]
        guard second >= secondLow, second <= secondHigh else { throw invalidUTF8() }
        for offset in 2..<count where input[index + offset] & 0xC0 != 0x80 {
            throw invalidUTF8()
        }
        index += count
    }

    private mutating func parseEscape(into bytes: inout [UInt8]) throws(JSONSyntaxError) {
        let escapeOffset = index
        index += 1
        guard index < input.count else { throw endOfInput() }
        let byte = input[index]
        index += 1
        switch byte {
        case UInt8(ascii: "\""): bytes.append(UInt8(ascii: "\""))
        case UInt8(ascii: "\\"): bytes.append(UInt8(ascii: "\\"))
        case UInt8(ascii: "/"): bytes.append(UInt8(ascii: "/"))
        case UInt8(ascii: "b"): bytes.append(0x08)
        case UInt8(ascii: "f"): bytes.append(0x0C)
        case UInt8(ascii: "n"): bytes.append(0x0A)
        case UInt8(ascii: "r"): bytes.append(0x0D)
        case UInt8(ascii: "t"): bytes.append(0x09)
        case UInt8(ascii: "u"):
            let unit = try parseHex4()
            var scalarValue = UInt32(unit)
            switch unit {
            case 0xD800...0xDBFF:
                guard index + 1 < input.count, input[index] == UInt8(ascii: "\\"), input[index + 1] == UInt8(ascii: "u")
                else {
                    throw JSONSyntaxError(offset: escapeOffset, reason: "high surrogate escape without a low surrogate")
                }
                index += 2
                let low = try parseHex4()
                guard (0xDC00...0xDFFF).contains(low) else {
                    throw JSONSyntaxError(offset: escapeOffset, reason: "high surrogate escape without a low surrogate")
                }
                scalarValue = 0x10000 + ((UInt32(unit) - 0xD800) << 10) + (UInt32(low) - 0xDC00)
            case 0xDC00...0xDFFF:
                throw JSONSyntaxError(offset: escapeOffset, reason: "low surrogate escape without a high surrogate")
            default:
                break
            }
            // Every value left is a valid scalar: surrogates were handled above.
            let scalar = Unicode.Scalar(scalarValue)!
            bytes.append(contentsOf: UTF8.encode(scalar)!)
        default:
            throw JSONSyntaxError(offset: escapeOffset, reason: "invalid escape sequence")
        }
    }

    private mutating func parseHex4() throws(JSONSyntaxError) -> UInt16 {
        guard index + 4 <= input.count else { throw endOfInput() }
        var value: UInt16 = 0
        for _ in 0..<4 {
            let byte = input[index]
            let digit: UInt8
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = byte - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = byte - UInt8(ascii: "a") + 10
            case UInt8(ascii: "A")...UInt8(ascii: "F"): digit = byte - UInt8(ascii: "A") + 10
            default: throw unexpected("expected a hexadecimal digit in \\u escape")
            }
            value = value << 4 | UInt16(digit)
            index += 1
        }
        return value
    }

    /// `-? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?`, kept as text.
    private mutating func parseNumber() throws(JSONSyntaxError) -> String {
        let start = index
        if peek() == UInt8(ascii: "-") { index += 1 }
        switch peek() {
        case UInt8(ascii: "0"):
            index += 1
            if let next = peek(), Self.isDigit(next) {
                throw unexpected("leading zeros are not allowed")
            }
        case let byte? where Self.isDigit(byte):
            skipDigits()
        default:
            throw unexpected("expected a digit")
        }
        if peek() == UInt8(ascii: ".") {
            index += 1
            guard let byte = peek(), Self.isDigit(byte) else { throw unexpected("expected a digit after '.'") }
            skipDigits()
        }
        if peek() == UInt8(ascii: "e") || peek() == UInt8(ascii: "E") {
            index += 1
            if peek() == UInt8(ascii: "+") || peek() == UInt8(ascii: "-") { index += 1 }
            guard let byte = peek(), Self.isDigit(byte) else { throw unexpected("expected a digit in exponent") }
            skipDigits()
        }
        return String(decoding: UnsafeBufferPointer(rebasing: input[start..<index]), as: UTF8.self)
    }

    private mutating func expectLiteral(_ literal: StaticString) throws(JSONSyntaxError) {
        let start = index
        let count = literal.utf8CodeUnitCount
        guard index + count <= input.count else { throw JSONSyntaxError(offset: start, reason: "invalid literal") }
        let expected = UnsafeBufferPointer(start: literal.utf8Start, count: count)
        for offset in 0..<count where input[index + offset] != expected[offset] {
            throw JSONSyntaxError(offset: start, reason: "invalid literal")
        }
        index += count
    }

    private mutating func skipWhitespace() {
        while index < input.count {
            switch input[index] {
            case UInt8(ascii: " "), UInt8(ascii: "\t"), UInt8(ascii: "\n"), UInt8(ascii: "\r"): index += 1
            default: return
            }
        }
    }

    private mutating func skipDigits() {
        while let byte = peek(), Self.isDigit(byte) { index += 1 }
    }

    private func peek() -> UInt8? {
        index < input.count ? input[index] : nil
    }

    private static func isDigit(_ byte: UInt8) -> Bool {
        byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9")
    }

    private static func clipped(_ text: String) -> String {
        text.count <= 40 ? text : String(text.prefix(40)) + "…"
    }

    private func endOfInput() -> JSONSyntaxError {
        JSONSyntaxError(offset: index, reason: "unexpected end of input")
    }

    private func tooDeep() -> JSONSyntaxError {
        JSONSyntaxError(offset: index, reason: "nesting deeper than \(maxDepth) levels")
    }

    private func invalidUTF8() -> JSONSyntaxError {
        JSONSyntaxError(offset: index, reason: "invalid UTF-8")
    }

    private func unexpected(_ expectation: String) -> JSONSyntaxError {
        guard index < input.count else { return endOfInput() }
        let byte = input[index]
        let shown = byte >= 0x20 && byte < 0x7F
            ? "'\(Character(Unicode.Scalar(byte)))'"
            : "byte 0x" + String(byte, radix: 16, uppercase: true)
        return JSONSyntaxError(offset: index, reason: "\(expectation), found \(shown)")
    }
}
