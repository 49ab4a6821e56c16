// MARK: - Serialization

extension JSONValue {
    /// Compact UTF-8 JSON text: the one writer of every JSON the service
    /// sends or logs. Slashes are not escaped; number literals are written
    /// as stored; members in their order.
    public func serialized() -> [UInt8] {
        var writer = JSONWriter(layout: .compact)
        writer.write(self)
        return writer.out
    }

    /// `serialized()` as a `String`.
    public func serializedText() -> String {
        String(decoding: serialized(), as: UTF8.self)
    }

    /// The same text laid out for people: each member and element on a line
    /// of its own, indented two spaces a level, `"key" : value`.
    public func serializedIndented() -> [UInt8] {
        var writer = JSONWriter(layout: .indented)
        writer.write(self)
        return writer.out
    }
}

/// Writes `JSONValue`s. Iterative, so a deep value cannot exhaust the stack;
/// strings are escaped in one place, `writeString`.
struct JSONWriter {
    enum Layout {
        case compact, indented
    }

    private enum Frame {
        case array([JSONValue], next: Int)
        case object([(key: String, value: JSONValue)], next: Int)
    }

    let layout: Layout
    private(set) var out: [UInt8] = []

    init(layout: Layout) {
        self.layout = layout
        out.reserveCapacity(128)
    }

    mutating func write(_ root: JSONValue) {
        var stack: [Frame] = []
        var pending: JSONValue? = root
        while true {
            if let value = pending {
                pending = nil
                switch value {
                case .null: out.append(contentsOf: "null".utf8)
                case .bool(let b): out.append(contentsOf: (b ? "true" : "false").utf8)
                case .number(let literal): out.append(contentsOf: literal.utf8)
                case .string(let s): writeString(s)
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
                guard next < elements.count else {
                    close(UInt8(ascii: "]"), count: next, depth: depth)
                    continue
                }
                startItem(next, depth: depth + 1)
                pending = elements[next]
                stack.append(.array(elements, next: next + 1))
            case .object(let members, let next):
                guard next < members.count else {
                    close(UInt8(ascii: "}"), count: next, depth: depth)
                    continue
                }
                startItem(next, depth: depth + 1)
                writeString(members[next].key)
                out.append(contentsOf: layout == .indented ? " : ".utf8 : ":".utf8)
                pending = members[next].value
                stack.append(.object(members, next: next + 1))
            }
        }
    }

    /// The separator before a container's item `index`, on a line of its own
    /// when indented.
    private mutating func startItem(_ index: Int, depth: Int) {
        if index > 0 { out.append(UInt8(ascii: ",")) }
        if layout == .indented { newLine(depth: depth) }
    }

    /// The closing bracket of a container of `count` items; an empty one
    /// stays on its opening line.
    private mutating func close(_ bracket: UInt8, count: Int, depth: Int) {
        if layout == .indented && count > 0 { newLine(depth: depth) }
        out.append(bracket)
    }

    private mutating func newLine(depth: Int) {
        out.append(UInt8(ascii: "\n"))
        out.append(contentsOf: repeatElement(UInt8(ascii: " "), count: 2 * depth))
    }

    /// A JSON string: `"` and `\` escaped, control characters as `\n`, `\r`,
    /// `\t` or `\u00XX`; everything else, non-ASCII included, as UTF-8.
    private mutating func writeString(_ s: String) {
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
