import Foundation

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

// MARK: - Serialization

extension JSONValue {
    /// Compact UTF-8 JSON text. Slashes are not escaped; number literals are
    /// written as stored. Iterative, so a deep value cannot exhaust the stack.
    public func serialized() -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(128)
        JSONWriter.write(self, into: &out)
        return out
    }
}

enum JSONWriter {
    private enum Frame {
        case array([JSONValue], next: Int)
        case object([(key: String, value: JSONValue)], next: Int)
    }

    static func write(_ root: JSONValue, into out: inout [UInt8]) {
        var stack: [Frame] = []
        var pending: JSONValue? = root
        while true {
            if let value = pending {
                pending = nil
                switch value {
                case .null: out.append(contentsOf: "null".utf8)
                case .bool(let b): out.append(contentsOf: (b ? "true" : "false").utf8)
                case .number(let literal): out.append(contentsOf: literal.utf8)
                case .string(let s): writeString(s, into: &out)
                case .array(let elements):
                    out.append(UInt8(ascii: "["))
                    stack.append(.array(elements, next: 0))
                case .object(let members):
                    out.append(UInt8(ascii: "{"))
                    stack.append(.object(members, next: 0))
                }
            }
            guard let frame = stack.popLast() else { return }
            switch frame {
            case .array(let elements, let next):
                if next == elements.count {
                    out.append(UInt8(ascii: "]"))
                } else {
                    if next > 0 { out.append(UInt8(ascii: ",")) }
                    pending = elements[next]
                    stack.append(.array(elements, next: next + 1))
                }
            case .object(let members, let next):
                if next == members.count {
                    out.append(UInt8(ascii: "}"))
                } else {
                    if next > 0 { out.append(UInt8(ascii: ",")) }
                    writeString(members[next].key, into: &out)
                    out.append(UInt8(ascii: ":"))
                    pending = members[next].value
                    stack.append(.object(members, next: next + 1))
                }
            }
        }
    }

    static func writeString(_ s: String, into out: inout [UInt8]) {
        out.append(UInt8(ascii: "\""))
        for byte in s.utf8 {
            switch byte {
            case UInt8(ascii: "\""): out.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "\"")])
            case UInt8(ascii: "\\"): out.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "\\")])
            case UInt8(ascii: "\n"): out.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "n")])
            case UInt8(ascii: "\r"): out.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "r")])
            case UInt8(ascii: "\t"): out.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "t")])
            case 0..<0x20:
                let hex = Array("0123456789abcdef".utf8)
                out.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "u"), UInt8(ascii: "0"), UInt8(ascii: "0")])
                out.append(hex[Int(byte >> 4)])
                out.append(hex[Int(byte & 0x0F)])
            default: out.append(byte)
            }
        }
        out.append(UInt8(ascii: "\""))
    }
}
