/// A JSON document as parsed, without loss: numbers keep their literal text
/// and object members keep their order.
///
/// Equality compares number literals as text (`1.0` is not `1`), which is what
/// a strict API wants when it echoes or stores a client's value.
public enum JSONValue: Sendable, Equatable {
    case null
    case bool(Bool)
    /// The number's literal text as it appeared, e.g. `6`, `-1.5e3`.
    case number(String)
    case string(String)
    case array([JSONValue])
    /// Members in document order. The strict parser never produces duplicate keys.
    case object([(key: String, value: JSONValue)])

    public init(_ value: some BinaryInteger) {
        self = .number(String(value))
    }

    /// The first member named `key` when this is an object, else nil.
    public subscript(key: String) -> JSONValue? {
        guard case .object(let members) = self else { return nil }
        return members.first { $0.key == key }?.value
    }

    public static func == (lhs: JSONValue, rhs: JSONValue) -> Bool {
        switch (lhs, rhs) {
        case (.null, .null): true
        case let (.bool(a), .bool(b)): a == b
        case let (.number(a), .number(b)): a == b
        case let (.string(a), .string(b)): a == b
        case let (.array(a), .array(b)): a == b
        case let (.object(a), .object(b)):
            a.count == b.count && zip(a, b).allSatisfy { $0.key == $1.key && $0.value == $1.value }
        default: false
        }
    }
}

extension JSONValue: ExpressibleByNilLiteral, ExpressibleByBooleanLiteral, ExpressibleByIntegerLiteral,
    ExpressibleByStringLiteral, ExpressibleByArrayLiteral, ExpressibleByDictionaryLiteral
{
    public init(nilLiteral: ()) { self = .null }
    public init(booleanLiteral value: Bool) { self = .bool(value) }
    public init(integerLiteral value: Int) { self = .number(String(value)) }
    public init(stringLiteral value: String) { self = .string(value) }
    public init(arrayLiteral elements: JSONValue...) { self = .array(elements) }
    /// Members keep the order written in the literal.
    public init(dictionaryLiteral elements: (String, JSONValue)...) {
        self = .object(elements.map { (key: $0.0, value: $0.1) })
    }
}

// MARK: - Reading

extension JSONValue {
    /// The text when this is a string; a number is not its digits.
    public var stringValue: String? {
        guard case .string(let text) = self else { return nil }
        return text
    }

    /// The value when this is `true` or `false`; a number is not a Boolean.
    public var boolValue: Bool? {
        guard case .bool(let value) = self else { return nil }
        return value
    }

    /// The elements when this is an array.
    public var arrayValue: [JSONValue]? {
        guard case .array(let elements) = self else { return nil }
        return elements
    }

    /// The strings when this is an array of strings and nothing else.
    public var stringArrayValue: [String]? {
        guard case .array(let elements) = self else { return nil }
        let strings = elements.compactMap(\.stringValue)
        return strings.count == elements.count ? strings : nil
    }

    /// The members, in document order, when this is an object.
    public var objectMembers: [(key: String, value: JSONValue)]? {
        guard case .object(let members) = self else { return nil }
        return members
    }

    /// The number when this is an integer literal (digits and an optional
    /// minus sign: no fraction, no exponent) within `type`'s range.
    public func integer<Integer: FixedWidthInteger>(as type: Integer.Type) -> Integer? {
        guard case .number(let literal) = self else { return nil }
        var digits = literal.utf8[...]
        if digits.first == UInt8(ascii: "-") { digits = digits.dropFirst() }
        guard !digits.isEmpty, digits.allSatisfy({ $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }) else {
            return nil
        }
        return Integer(literal, radix: 10)
    }

    /// The number as the nearest `Double` when this is a number literal of
    /// any form that does not overflow it (`1e400` does).
    public var doubleValue: Double? {
        guard case .number(let literal) = self, let value = Double(literal), value.isFinite else { return nil }
        return value
    }
}

// MARK: - Canonical form

extension JSONValue {
    /// The same document with object members sorted by key (UTF-8 byte
    /// order) at every depth, so one document always writes the same bytes.
    public func canonicalized() -> JSONValue {
        switch self {
        case .object(let members):
            .object(members.map { ($0.key, $0.value.canonicalized()) }.sorted { $0.0.utf8.lexicographicallyPrecedes($1.0.utf8) })
        case .array(let elements):
            .array(elements.map { $0.canonicalized() })
        default:
            self
        }
    }
}
