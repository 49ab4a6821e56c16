/// One HTTP request, complete with its body.
public struct Request: Sendable {
    /// As sent; methods are case-sensitive, so routes use uppercase.
    public let method: String
    /// The percent-decoded path, without the query.
    public let path: String
    /// Query parameters, percent- and `+`-decoded; the first value of a name wins.
    public let query: [String: String]
    public let headers: Headers
    public let body: [UInt8]
    /// The client's `X-Request-Id` when acceptable, else a generated one.
    public let requestID: String
    /// Values of the route's `{name}` segments, percent-decoded.
    public internal(set) var pathParameters: [String: String]
    /// The peer's IP address, without port.
    public let remoteAddress: String?
    /// What the route's gate returned, if it has one.
    public let admission: (any Sendable)?

    public init(
        method: String,
        path: String,
        query: [String: String] = [:],
        headers: Headers = Headers([]),
        body: [UInt8] = [],
        requestID: String,
        pathParameters: [String: String] = [:],
        remoteAddress: String? = nil,
        admission: (any Sendable)? = nil
    ) {
        self.method = method
        self.path = path
        self.query = query
        self.headers = headers
        self.body = body
        self.requestID = requestID
        self.pathParameters = pathParameters
        self.remoteAddress = remoteAddress
        self.admission = admission
    }
}

/// Header fields in arrival order. Names compare case-insensitively and are
/// stored in lowercase.
public struct Headers: Sendable, Sequence {
    public typealias Element = (name: String, value: String)

    private let fields: [Element]

    public init(_ fields: [(name: String, value: String)]) {
        self.fields = fields.map { (Self.lowercased($0.name), $0.value) }
    }

    /// The first value of the field `name`, or nil.
    public subscript(name: String) -> String? {
        let wanted = Self.lowercased(name)
        return fields.first { $0.name == wanted }?.value
    }

    /// Every value of the field `name`, in arrival order.
    public func values(for name: String) -> [String] {
        let wanted = Self.lowercased(name)
        return fields.filter { $0.name == wanted }.map(\.value)
    }

    public var count: Int { fields.count }

    public func makeIterator() -> IndexingIterator<[Element]> {
        fields.makeIterator()
    }

    /// Field names are ASCII tokens; skip the allocation when already lowercase.
    private static func lowercased(_ name: String) -> String {
        name.utf8.contains { $0 >= UInt8(ascii: "A") && $0 <= UInt8(ascii: "Z") } ? name.lowercased() : name
    }
}

// MARK: - Request target

/// The parts of an origin-form request target (`/path?query`).
struct RequestTarget {
    /// Percent-decoded segments; `/` gives `[""]`.
    var segments: [String]
    var path: String
    var query: [String: String]

    /// Nil when the target is neither origin-form nor absolute-form
    /// (`http://host/path`, which RFC 9112 requires servers to accept), or
    /// its encoding is invalid.
    init?(raw: [UInt8]) {
        let raw = Self.originForm(raw)
        guard raw.first == UInt8(ascii: "/") else { return nil }
        let queryStart = raw.firstIndex(of: UInt8(ascii: "?")) ?? raw.endIndex
        var segments: [String] = []
        for piece in raw[1..<queryStart].split(separator: UInt8(ascii: "/"), omittingEmptySubsequences: false) {
            guard let segment = Self.percentDecoded(piece, plusIsSpace: false) else { return nil }
            segments.append(segment)
        }
        var query: [String: String] = [:]
        if queryStart < raw.endIndex {
            // The query is encoded as a form is.
            guard let fields = Forms.fields(Array(raw[(queryStart + 1)...])) else { return nil }
            query = fields
        }
        self.segments = segments
        self.path = "/" + segments.joined(separator: "/")
        self.query = query
    }

    /// The path and query of an absolute-form target; other targets unchanged.
    private static func originForm(_ raw: [UInt8]) -> [UInt8] {
        let lowered = raw.prefix(8).map { $0 | 0x20 }
        let schemeLength: Int
        if lowered.starts(with: Array("http://".utf8)) {
            schemeLength = 7
        } else if lowered.starts(with: Array("https://".utf8)) {
            schemeLength = 8
        } else {
            return raw
        }
        let rest = raw.dropFirst(schemeLength)
        guard let pathStart = rest.firstIndex(where: { $0 == UInt8(ascii: "/") || $0 == UInt8(ascii: "?") }) else {
            return [UInt8(ascii: "/")]
        }
        let tail = Array(raw[pathStart...])
        return tail.first == UInt8(ascii: "/") ? tail : [UInt8(ascii: "/")] + tail
    }

    /// Decodes `%XX` escapes (and `+` when asked); nil for a malformed escape
    /// or a result that is not UTF-8.
    static func percentDecoded(_ bytes: ArraySlice<UInt8>, plusIsSpace: Bool) -> String? {
        guard bytes.contains(UInt8(ascii: "%")) || (plusIsSpace && bytes.contains(UInt8(ascii: "+"))) else {
            return String(validating: bytes, as: UTF8.self)
        }
        var decoded: [UInt8] = []
        decoded.reserveCapacity(bytes.count)
        var index = bytes.startIndex
        while index < bytes.endIndex {
            let byte = bytes[index]
            if byte == UInt8(ascii: "%") {
                guard index + 2 < bytes.endIndex,
                      let high = hexValue(bytes[index + 1]), let low = hexValue(bytes[index + 2])
                else { return nil }
                decoded.append(high << 4 | low)
                index += 3
            } else {
                decoded.append(plusIsSpace && byte == UInt8(ascii: "+") ? UInt8(ascii: " ") : byte)
                index += 1
            }
        }
        return String(validating: decoded, as: UTF8.self)
    }

    private static func hexValue(_ byte: UInt8) -> UInt8? {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): byte - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): byte - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): byte - UInt8(ascii: "A") + 10
        default: nil
        }
    }
}
