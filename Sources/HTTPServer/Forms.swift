/// HTML forms and cookies, for routes that serve pages rather than JSON.
public enum Forms {
    /// The fields of an `application/x-www-form-urlencoded` body, the first
    /// value of a name winning; nil when an escape is malformed or a value
    /// is not UTF-8.
    public static func fields(_ body: [UInt8]) -> [String: String]? {
        var fields: [String: String] = [:]
        for pair in body.split(separator: UInt8(ascii: "&")) {
            let equals = pair.firstIndex(of: UInt8(ascii: "=")) ?? pair.endIndex
            guard let name = RequestTarget.percentDecoded(pair[..<equals], plusIsSpace: true) else { return nil }
            let rawValue = equals < pair.endIndex ? pair[(equals + 1)...] : pair[pair.endIndex...]
            guard let value = RequestTarget.percentDecoded(rawValue, plusIsSpace: true) else { return nil }
            if fields[name] == nil { fields[name] = value }
        }
        return fields
    }

    /// The value of the cookie `name` in the request's `Cookie` fields
    /// (RFC 6265 `name=value; name2=value2`), the first one winning.
    public static func cookie(_ name: String, in headers: Headers) -> String? {
        for field in headers.values(for: "cookie") {
            for pair in field.split(separator: ";") {
                let trimmed = pair.drop { $0 == " " }
                guard let equals = trimmed.firstIndex(of: "="), trimmed[..<equals] == name else { continue }
                var value = trimmed[trimmed.index(after: equals)...]
                if value.count >= 2, value.first == "\"", value.last == "\"" { value = value.dropFirst().dropLast() }
                return String(value)
            }
        }
        return nil
    }

    /// `text` percent-encoded for one path segment or query value: every
    /// byte but the unreserved ones (RFC 3986) escaped.
    public static func percentEncoded(_ text: String) -> String {
        var encoded = ""
        encoded.reserveCapacity(text.utf8.count)
        let hex = Array("0123456789ABCDEF".utf8)
        for byte in text.utf8 {
            switch byte {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"),
                 UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"),
                 UInt8(ascii: "~"):
                encoded.unicodeScalars.append(Unicode.Scalar(byte))
            default:
                encoded.unicodeScalars.append("%")
                encoded.unicodeScalars.append(Unicode.Scalar(hex[Int(byte >> 4)]))
                encoded.unicodeScalars.append(Unicode.Scalar(hex[Int(byte & 0x0F)]))
            }
        }
        return encoded
    }
}
