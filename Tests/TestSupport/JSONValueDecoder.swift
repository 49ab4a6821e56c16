import Foundation
public import JSON

/// Decodes `Decodable` types from a parsed ``JSONValue`` with strict scalar rules:
///
/// - Integer types accept only an integer literal (no fraction, no exponent)
///   that fits the type; `-0` is read as 0.
/// - `String` only from a string, `Bool` only from `true`/`false`: no coercion.
/// - `Double` and `Float` from any number that is finite in the type;
///   `Decimal` from any number, exactly.
/// - `JSONValue` fields receive the value as parsed.
///
/// Failures are `DecodingError`s whose coding path names the field and whose
/// description is written for the API client. Errors thrown by a type's own
/// `init(from:)` pass through unchanged.
public struct JSONValueDecoder: Sendable {
    public init() {}

    public func decode<T: Decodable>(_ type: T.Type, from value: JSONValue) throws -> T {
        try StrictDecoder(value: value, codingPath: []).decode(type)
    }
}

/// A `Decoder` positioned at one value.
final class StrictDecoder: Decoder {
    let value: JSONValue
    let codingPath: [any CodingKey]
    var userInfo: [CodingUserInfoKey: Any] { [:] }

    init(value: JSONValue, codingPath: [any CodingKey]) {
        self.value = value
        self.codingPath = codingPath
    }

    func container<Key: CodingKey>(keyedBy type: Key.Type) throws -> KeyedDecodingContainer<Key> {
        guard case .object(let members) = value else {
            throw mismatch([String: JSONValue].self, "expected an object, found \(value.kind)")
        }
        return KeyedDecodingContainer(StrictKeyedContainer<Key>(members: members, codingPath: codingPath))
    }

    func unkeyedContainer() throws -> any UnkeyedDecodingContainer {
        guard case .array(let elements) = value else {
            throw mismatch([JSONValue].self, "expected an array, found \(value.kind)")
        }
        return StrictUnkeyedContainer(elements: elements, codingPath: codingPath)
    }

    func singleValueContainer() throws -> any SingleValueDecodingContainer {
        StrictSingleValueContainer(decoder: self)
    }

    // MARK: Scalars, shared by every container

    func decode<T: Decodable>(_ type: T.Type) throws -> T {
        if T.self == JSONValue.self { return value as! T }
        if T.self == Decimal.self { return try decodeDecimal() as! T }
        return try T(from: self)
    }

    func decodeBool() throws -> Bool {
        try rejectNull(Bool.self)
        guard case .bool(let b) = value else {
            throw mismatch(Bool.self, "expected true or false, found \(value.kind)")
        }
        return b
    }

    func decodeString() throws -> String {
        try rejectNull(String.self)
        guard case .string(let s) = value else {
            throw mismatch(String.self, "expected a string, found \(value.kind)")
        }
        return s
    }

    func decodeInteger<T: FixedWidthInteger>(_ type: T.Type) throws -> T {
        try rejectNull(T.self)
        guard case .number(let literal) = value else {
            throw mismatch(T.self, "expected an integer, found \(value.kind)")
        }
        guard Self.isIntegerLiteral(literal) else {
            throw mismatch(T.self, "expected an integer, found \(Self.clipped(literal))")
        }
        if literal == "-0" { return 0 }
        guard let result = T(literal, radix: 10) else {
            throw DecodingError.dataCorrupted(.init(
                codingPath: codingPath,
                debugDescription: "integer \(Self.clipped(literal)) is outside \(T.min)...\(T.max)"))
        }
        return result
    }

    func decodeFloatingPoint<T: BinaryFloatingPoint & LosslessStringConvertible>(_ type: T.Type) throws -> T {
        try rejectNull(T.self)
        guard case .number(let literal) = value else {
            throw mismatch(T.self, "expected a number, found \(value.kind)")
        }
        guard let result = T(literal), result.isFinite else {
            throw DecodingError.dataCorrupted(.init(
                codingPath: codingPath, debugDescription: "number \(Self.clipped(literal)) is out of range"))
        }
        return result
    }

    private func decodeDecimal() throws -> Decimal {
        try rejectNull(Decimal.self)
        guard case .number(let literal) = value else {
            throw mismatch(Decimal.self, "expected a number, found \(value.kind)")
        }
        guard let result = Decimal(string: literal, locale: nil), !result.isNaN else {
            throw DecodingError.dataCorrupted(.init(
                codingPath: codingPath, debugDescription: "number \(Self.clipped(literal)) is out of range"))
        }
        return result
    }

    private func rejectNull<T>(_ type: T.Type) throws {
        if value == .null {
            throw DecodingError.valueNotFound(T.self, .init(codingPath: codingPath, debugDescription: "must not be null"))
        }
    }

    private func mismatch<T>(_ type: T.Type, _ description: String) -> DecodingError {
        .typeMismatch(T.self, .init(codingPath: codingPath, debugDescription: description))
    }

    /// `-?[0-9]+`: what is left of a JSON number without fraction or exponent.
    static func isIntegerLiteral(_ literal: String) -> Bool {
        var digits = literal.utf8[...]
        if digits.first == UInt8(ascii: "-") { digits = digits.dropFirst() }
        return !digits.isEmpty && digits.allSatisfy { $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }
    }

    /// Client input echoed in an error message is cut short.
    static func clipped(_ text: String) -> String {
        text.count <= 40 ? text : String(text.prefix(40)) + "…"
    }
}

private struct StrictSingleValueContainer: SingleValueDecodingContainer {
    let decoder: StrictDecoder
    var codingPath: [any CodingKey] { decoder.codingPath }

    func decodeNil() -> Bool { decoder.value == .null }
    func decode(_ type: Bool.Type) throws -> Bool { try decoder.decodeBool() }
    func decode(_ type: String.Type) throws -> String { try decoder.decodeString() }
    func decode(_ type: Double.Type) throws -> Double { try decoder.decodeFloatingPoint(type) }
    func decode(_ type: Float.Type) throws -> Float { try decoder.decodeFloatingPoint(type) }
    func decode(_ type: Int.Type) throws -> Int { try decoder.decodeInteger(type) }
    func decode(_ type: Int8.Type) throws -> Int8 { try decoder.decodeInteger(type) }
    func decode(_ type: Int16.Type) throws -> Int16 { try decoder.decodeInteger(type) }
    func decode(_ type: Int32.Type) throws -> Int32 { try decoder.decodeInteger(type) }
    func decode(_ type: Int64.Type) throws -> Int64 { try decoder.decodeInteger(type) }
    func decode(_ type: UInt.Type) throws -> UInt { try decoder.decodeInteger(type) }
    func decode(_ type: UInt8.Type) throws -> UInt8 { try decoder.decodeInteger(type) }
    func decode(_ type: UInt16.Type) throws -> UInt16 { try decoder.decodeInteger(type) }
    func decode(_ type: UInt32.Type) throws -> UInt32 { try decoder.decodeInteger(type) }
    func decode(_ type: UInt64.Type) throws -> UInt64 { try decoder.decodeInteger(type) }
    func decode<T: Decodable>(_ type: T.Type) throws -> T { try decoder.decode(type) }
}

private struct StrictKeyedContainer<Key: CodingKey>: KeyedDecodingContainerProtocol {
    let members: [(key: String, value: JSONValue)]
    let codingPath: [any CodingKey]

    var allKeys: [Key] { members.compactMap { Key(stringValue: $0.key) } }

    func contains(_ key: Key) -> Bool { lookup(key) != nil }

    private func lookup(_ key: Key) -> JSONValue? {
        members.first { $0.key == key.stringValue }?.value
    }

    private func child(_ key: Key) throws -> StrictDecoder {
        guard let value = lookup(key) else {
            throw DecodingError.keyNotFound(key, .init(codingPath: codingPath, debugDescription: "is required"))
        }
        return StrictDecoder(value: value, codingPath: codingPath + [key])
    }

    func decodeNil(forKey key: Key) throws -> Bool { try child(key).value == .null }
    func decode(_ type: Bool.Type, forKey key: Key) throws -> Bool { try child(key).decodeBool() }
    func decode(_ type: String.Type, forKey key: Key) throws -> String { try child(key).decodeString() }
    func decode(_ type: Double.Type, forKey key: Key) throws -> Double { try child(key).decodeFloatingPoint(type) }
    func decode(_ type: Float.Type, forKey key: Key) throws -> Float { try child(key).decodeFloatingPoint(type) }
    func decode(_ type: Int.Type, forKey key: Key) throws -> Int { try child(key).decodeInteger(type) }
    func decode(_ type: Int8.Type, forKey key: Key) throws -> Int8 { try child(key).decodeInteger(type) }
    func decode(_ type: Int16.Type, forKey key: Key) throws -> Int16 { try child(key).decodeInteger(type) }
    func decode(_ type: Int32.Type, forKey key: Key) throws -> Int32 { try child(key).decodeInteger(type) }
    func decode(_ type: Int64.Type, forKey key: Key) throws -> Int64 { try child(key).decodeInteger(type) }
    func decode(_ type: UInt.Type, forKey key: Key) throws -> UInt { try child(key).decodeInteger(type) }
    func decode(_ type: UInt8.Type, forKey key: Key) throws -> UInt8 { try child(key).decodeInteger(type) }
    func decode(_ type: UInt16.Type, forKey key: Key) throws -> UInt16 { try child(key).decodeInteger(type) }
    func decode(_ type: UInt32.Type, forKey key: Key) throws -> UInt32 { try child(key).decodeInteger(type) }
    func decode(_ type: UInt64.Type, forKey key: Key) throws -> UInt64 { try child(key).decodeInteger(type) }
    func decode<T: Decodable>(_ type: T.Type, forKey key: Key) throws -> T { try child(key).decode(type) }

    func nestedContainer<NestedKey: CodingKey>(
        keyedBy type: NestedKey.Type, forKey key: Key
    ) throws -> KeyedDecodingContainer<NestedKey> {
        try child(key).container(keyedBy: type)
    }

    func nestedUnkeyedContainer(forKey key: Key) throws -> any UnkeyedDecodingContainer {
        try child(key).unkeyedContainer()
    }

    func superDecoder() throws -> any Decoder {
        StrictDecoder(
            value: members.first { $0.key == "super" }?.value ?? .null,
            codingPath: codingPath + [JSONKey(stringValue: "super")])
    }

    func superDecoder(forKey key: Key) throws -> any Decoder {
        StrictDecoder(value: lookup(key) ?? .null, codingPath: codingPath + [key])
    }
}

private struct StrictUnkeyedContainer: UnkeyedDecodingContainer {
    let elements: [JSONValue]
    let codingPath: [any CodingKey]
    private(set) var currentIndex = 0

    init(elements: [JSONValue], codingPath: [any CodingKey]) {
        self.elements = elements
        self.codingPath = codingPath
    }

    var count: Int? { elements.count }
    var isAtEnd: Bool { currentIndex >= elements.count }

    /// The decoder for the next element; advances only when `body` succeeds.
    private mutating func next<T>(_ type: T.Type, _ body: (StrictDecoder) throws -> T) throws -> T {
        guard !isAtEnd else {
            throw DecodingError.valueNotFound(T.self, .init(
                codingPath: codingPath + [JSONKey(intValue: currentIndex)], debugDescription: "array has too few elements"))
        }
        let decoder = StrictDecoder(value: elements[currentIndex], codingPath: codingPath + [JSONKey(intValue: currentIndex)])
        let result = try body(decoder)
        currentIndex += 1
        return result
    }

    mutating func decodeNil() throws -> Bool {
        guard !isAtEnd else {
            throw DecodingError.valueNotFound(JSONValue.self, .init(
                codingPath: codingPath + [JSONKey(intValue: currentIndex)], debugDescription: "array has too few elements"))
        }
        if elements[currentIndex] == .null {
            currentIndex += 1
            return true
        }
        return false
    }

    mutating func decode(_ type: Bool.Type) throws -> Bool { try next(type) { try $0.decodeBool() } }
    mutating func decode(_ type: String.Type) throws -> String { try next(type) { try $0.decodeString() } }
    mutating func decode(_ type: Double.Type) throws -> Double { try next(type) { try $0.decodeFloatingPoint(type) } }
    mutating func decode(_ type: Float.Type) throws -> Float { try next(type) { try $0.decodeFloatingPoint(type) } }
    mutating func decode(_ type: Int.Type) throws -> Int { try next(type) { try $0.decodeInteger(type) } }
    mutating func decode(_ type: Int8.Type) throws -> Int8 { try next(type) { try $0.decodeInteger(type) } }
    mutating func decode(_ type: Int16.Type) throws -> Int16 { try next(type) { try $0.decodeInteger(type) } }
    mutating func decode(_ type: Int32.Type) throws -> Int32 { try next(type) { try $0.decodeInteger(type) } }
    mutating func decode(_ type: Int64.Type) throws -> Int64 { try next(type) { try $0.decodeInteger(type) } }
    mutating func decode(_ type: UInt.Type) throws -> UInt { try next(type) { try $0.decodeInteger(type) } }
    mutating func decode(_ type: UInt8.Type) throws -> UInt8 { try next(type) { try $0.decodeInteger(type) } }
    mutating func decode(_ type: UInt16.Type) throws -> UInt16 { try next(type) { try $0.decodeInteger(type) } }
    mutating func decode(_ type: UInt32.Type) throws -> UInt32 { try next(type) { try $0.decodeInteger(type) } }
    mutating func decode(_ type: UInt64.Type) throws -> UInt64 { try next(type) { try $0.decodeInteger(type) } }
    mutating func decode<T: Decodable>(_ type: T.Type) throws -> T { try next(type) { try $0.decode(type) } }

    mutating func nestedContainer<NestedKey: CodingKey>(
        keyedBy type: NestedKey.Type
    ) throws -> KeyedDecodingContainer<NestedKey> {
        try next(KeyedDecodingContainer<NestedKey>.self) { try $0.container(keyedBy: type) }
    }

    mutating func nestedUnkeyedContainer() throws -> any UnkeyedDecodingContainer {
        try next((any UnkeyedDecodingContainer).self) { try $0.unkeyedContainer() }
    }

    mutating func superDecoder() throws -> any Decoder {
        try next((any Decoder).self) { $0 }
    }
}

// MARK: - Codable

/// Coding keys for arbitrary object members and array positions.
struct JSONKey: CodingKey {
    let stringValue: String
    let intValue: Int?

    init(stringValue: String) {
        self.stringValue = stringValue
        self.intValue = nil
    }

    init(intValue: Int) {
        self.stringValue = String(intValue)
        self.intValue = intValue
    }
}

extension JSONValue: Codable {
    /// Through ``JSONValueDecoder`` the value arrives as parsed. Through other
    /// decoders (Foundation's `JSONDecoder`) number literals and member order
    /// are reconstructed as well as those decoders allow.
    public init(from decoder: any Decoder) throws {
        if let strict = decoder as? StrictDecoder {
            self = strict.value
            return
        }
        if let container = try? decoder.container(keyedBy: JSONKey.self) {
            var members: [(key: String, value: JSONValue)] = []
            for key in container.allKeys.sorted(by: { $0.stringValue < $1.stringValue }) {
                members.append((key.stringValue, try container.decode(JSONValue.self, forKey: key)))
            }
            self = .object(members)
            return
        }
        if var container = try? decoder.unkeyedContainer() {
            var elements: [JSONValue] = []
            while !container.isAtEnd {
                elements.append(try container.decode(JSONValue.self))
            }
            self = .array(elements)
            return
        }
        let single = try decoder.singleValueContainer()
        if single.decodeNil() {
            self = .null
        } else if let b = try? single.decode(Bool.self) {
            self = .bool(b)
        } else if let i = try? single.decode(Int64.self) {
            self = .number(String(i))
        } else if let u = try? single.decode(UInt64.self) {
            self = .number(String(u))
        } else if let d = try? single.decode(Double.self) {
            self = .number(String(d))
        } else {
            self = .string(try single.decode(String.self))
        }
    }

    public func encode(to encoder: any Encoder) throws {
        switch self {
        case .null:
            var c = encoder.singleValueContainer()
            try c.encodeNil()
        case .bool(let b):
            var c = encoder.singleValueContainer()
            try c.encode(b)
        case .number(let literal):
            var c = encoder.singleValueContainer()
            if let i = Int64(literal) {
                try c.encode(i)
            } else if let u = UInt64(literal) {
                try c.encode(u)
            } else if let d = Decimal(string: literal, locale: nil) {
                try c.encode(d)
            } else {
                throw EncodingError.invalidValue(
                    literal, .init(codingPath: encoder.codingPath, debugDescription: "not a JSON number literal"))
            }
        case .string(let s):
            var c = encoder.singleValueContainer()
            try c.encode(s)
        case .array(let elements):
            var c = encoder.unkeyedContainer()
            for element in elements { try c.encode(element) }
        case .object(let members):
            var c = encoder.container(keyedBy: JSONKey.self)
            for member in members { try c.encode(member.value, forKey: JSONKey(stringValue: member.key)) }
        }
    }
}

extension JSONValue {
    /// What the value is, for an error message.
    var kind: String {
        switch self {
        case .null: "null"
        case .bool: "a boolean"
        case .number: "a number"
        case .string: "a string"
        case .array: "an array"
        case .object: "an object"
        }
    }
}
