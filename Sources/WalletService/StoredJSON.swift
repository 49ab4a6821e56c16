import HTTPServer

/// Answers whose body PostgreSQL already wrote: a credit or debit as the
/// ledger functions return (and store) it. The bytes go out as written, only
/// without the spaces `jsonb` prints after `:` and `,`, so a replay of a
/// stored answer is byte for byte the first one, and no JSON is decoded and
/// encoded again on the hot path.
enum StoredJSON {
    static func response(_ text: String, status: Int, headers: [(name: String, value: String)] = []) -> Response {
        Response(status: status, headers: [("Content-Type", "application/json")] + headers, body: compact(text))
    }

    /// The text without whitespace outside strings.
    static func compact(_ text: String) -> [UInt8] {
        var output: [UInt8] = []
        output.reserveCapacity(text.utf8.count)
        var inString = false
        var escaped = false
        for byte in text.utf8 {
            if inString {
                output.append(byte)
                if escaped {
                    escaped = false
                } else if byte == UInt8(ascii: "\\") {
                    escaped = true
                } else if byte == UInt8(ascii: "\"") {
                    inString = false
                }
                continue
            }
            switch byte {
            case UInt8(ascii: " "), UInt8(ascii: "\n"), UInt8(ascii: "\t"), UInt8(ascii: "\r"):
                continue
            case UInt8(ascii: "\""):
                inString = true
                output.append(byte)
            default:
                output.append(byte)
            }
        }
        return output
    }
}
