import HTTPServer

/// Replays of answers an earlier release stored whole, as `jsonb`: debits
/// stored before typed results (0007), and holds, captures and releases
/// stored before typed hold answers (0017). The bytes go out as first sent,
/// which was the `jsonb` text without the spaces it prints after `:` and
/// `,`. Answers stored since are rebuilt from typed columns by
/// `ResponseBody`.
enum LegacyReplay {
    static func response(_ text: String, status: Int = 201, headers: [(name: String, value: String)]) -> Response {
        Response(status: status, headers: [("Content-Type", "application/json")] + headers, body: JSONText.compact(text))
    }
}

/// JSON text PostgreSQL wrote (`jsonb::text`, with a space after `:` and
/// `,`), sent as the service writes JSON: legacy replays.
enum JSONText {
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
