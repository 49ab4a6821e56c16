// MARK: - Serialization

extension JSONValue {
    /// Compact UTF-8 JSON text: the one writer of every JSON the service
    /// sends or logs. Slashes are not escaped; number literals are written
    /// as stored; members in their order.
    public func serialized() -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(128)
        JSONWriter.write(self, layout: .compact, into: &out)
        return out
    }

    /// `serialized()` as a `String`.
    public func serializedText() -> String {
        String(decoding: serialized(), as: UTF8.self)
    }

    /// The same text laid out for people: each member and element on a line
    /// of its own, indented two spaces a level, `"key" : value`.
    public func serializedIndented() -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(256)
        JSONWriter.write(self, layout: .indented, into: &out)
        return out
    }
}

/// Writes `JSONValue`s. Iterative, so a deep value cannot exhaust the stack;
/// strings are escaped in one place, `writeString`.
enum JSONWriter {
    enum Layout {
        case compact, indented
    }

    private enum Frame {
        case array([JSONValue], next: Int)
        case object([(key: String, value: JSONValue)], next: Int)
    }

    static func write(_ root: JSONValue, layout: Layout, into out: inout [UInt8]) {
        let indented = layout == .indented
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
            // The frame's own depth is the number of containers around it.
            let depth = stack.count
            switch frame {
            case .array(let elements, let next):
                if next == elements.count {
                    if indented && next > 0 { newLine(depth: depth, into: &out) }
                    out.append(UInt8(ascii: "]"))
                } else {
                    if next > 0 { out.append(UInt8(ascii: ",")) }
                    if indented { newLine(depth: depth + 1, into: &out) }
                    pending = elements[next]
                    stack.append(.array(elements, next: next + 1))
                }
            case .object(let members, let next):
                if next == members.count {
                    if indented && next > 0 { newLine(depth: depth, into: &out) }
                    out.append(UInt8(ascii: "}"))
                } else {
                    if next > 0 { out.append(UInt8(ascii: ",")) }
                    if indented { newLine(depth: depth + 1, into: &out) }
                    writeString(members[next].key, into: &out)
                    out.append(contentsOf: indented ? " : ".utf8 : ":".utf8)
                    pending = members[next].value
                    stack.append(.object(members, next: next + 1))
                }
            }
        }
    }

    private static func newLine(depth: Int, into out: inout [UInt8]) {
        out.append(UInt8(ascii: "\n"))
        out.append(contentsOf: repeatElement(UInt8(ascii: " "), count: 2 * depth))
    }

    /// A JSON string: `"` and `\` escaped, control characters as `\n`, `\r`,
    /// `\t` or `\u00XX`; everything else, non-ASCII included, as UTF-8.
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
