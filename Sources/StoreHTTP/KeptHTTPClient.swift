public import Foundation

/// POSTs made one after another over one kept HTTP/1.1 connection, opened
/// by `connect` and used again while the server keeps it: no thread, no
/// session and no TCP or TLS handshake per request, and only a few
/// hundred bytes written per request. Each request is bounded by its
/// deadline. Redirects are not followed (the caller sees the 3xx), and an
/// answer's body is kept up to `answerBytesMax` bytes, the rest cut off.
///
/// A request that finds its kept connection closed by the server (before
/// any byte of an answer came back) is sent once more on a new one, so the
/// server may see it twice; use it where a request may arrive more than
/// once. For one thread at a time.
public final class KeptHTTPClient: @unchecked Sendable {
    /// Where a connection goes.
    public struct Origin: Hashable, Sendable {
        public var secure: Bool
        public var host: String
        public var port: Int
    }

    public typealias Connect = (Origin, ContinuousClock.Instant) throws -> any ByteTransport

    /// An answer's status line and headers, at most.
    static let headBytesMax = 16 * 1024
    static let receiveBytesMax = 16 * 1024

    private let answerBytesMax: Int
    private let connect: Connect
    private var kept: (origin: Origin, transport: any ByteTransport)?

    public init(answerBytesMax: Int, connect: @escaping Connect) {
        self.answerBytesMax = answerBytesMax
        self.connect = connect
    }

    /// Where a request goes: the origin, the request target and the Host
    /// header, read from an `http` or `https` URL once.
    public struct Target: Sendable {
        public let origin: Origin
        let path: String
        let hostHeader: String

        public init?(_ url: URL) {
            guard let components = URLComponents(url: url, resolvingAgainstBaseURL: false),
                  let scheme = components.scheme?.lowercased(), scheme == "http" || scheme == "https",
                  let host = components.host, !host.isEmpty else { return nil }
            origin = Origin(secure: scheme == "https", host: host, port: components.port ?? (scheme == "https" ? 443 : 80))
            var path = components.percentEncodedPath.isEmpty ? "/" : components.percentEncodedPath
            if let query = components.percentEncodedQuery { path += "?" + query }
            self.path = path
            hostHeader = (host.contains(":") ? "[\(host)]" : host) + (components.port.map { ":\($0)" } ?? "")
        }
    }

    /// POSTs `body` with `headers` (names and values as given, neither with
    /// a line break) to an `http` or `https` URL before `deadline`.
    public func post(_ url: URL, headers: [(String, String)], body: [UInt8],
                     deadline: ContinuousClock.Instant) -> HTTPExchange.Outcome {
        guard let target = Target(url) else { return .failure("not an http or https URL") }
        return post(target, headers: headers, body: body, deadline: deadline)
    }

    /// POSTs `body` with `headers` to `target` before `deadline`.
    public func post(_ target: Target, headers: [(String, String)], body: [UInt8],
                     deadline: ContinuousClock.Instant) -> HTTPExchange.Outcome {
        let origin = target.origin
        var head = "POST \(target.path) HTTP/1.1\r\nHost: \(target.hostHeader)\r\nContent-Length: \(body.count)\r\n"
        for (name, value) in headers { head += "\(name): \(value)\r\n" }
        head += "\r\n"
        var request: [UInt8] = []
        request.reserveCapacity(head.utf8.count + body.count)
        request += head.utf8
        request += body

        // A kept connection the server closed while it idled is noticed here
        // or, at the latest, when it yields no answer; then once more anew.
        for fresh in [false, true] {
            let reused = !fresh && kept?.origin == origin && kept?.transport.isIdle == true
            if !reused { kept = nil }
            do {
                let transport = try reused ? kept!.transport : connect(origin, deadline)
                kept = (origin, transport)
                switch try exchange(request, on: transport, deadline: deadline) {
                case .answered(let answer, let keepOpen):
                    if !keepOpen { kept = nil }
                    return answer
                case .closedUnanswered where reused:
                    continue
                case .closedUnanswered:
                    kept = nil
                    return .failure("the connection closed before an answer")
                }
            } catch {
                kept = nil
                if reused && ContinuousClock.now < deadline { continue }
                return .failure(String(describing: error))
            }
        }
        return .failure("the connection closed before an answer")
    }

    private enum Exchange {
        case answered(HTTPExchange.Outcome, keepOpen: Bool)
        /// The connection ended before any byte of an answer.
        case closedUnanswered
    }

    /// Sends one request and reads its answer (skipping interim 1xx ones).
    private func exchange(_ request: [UInt8], on transport: any ByteTransport,
                          deadline: ContinuousClock.Instant) throws -> Exchange {
        try transport.send(request, deadline: deadline)
        var buffered: [UInt8] = []
        var answeredAtAll = false
        // Each pass reads one answer's head; only interim answers loop.
        while true {
            guard let headEnd = try readHead(into: &buffered, from: transport, deadline: deadline) else {
                return answeredAtAll || !buffered.isEmpty ? .answered(.failure("the answer ended early"), keepOpen: false)
                                                          : .closedUnanswered
            }
            answeredAtAll = true
            guard let head = ResponseHead(Array(buffered[..<headEnd])) else {
                return .answered(.failure("the answer is not HTTP/1.x"), keepOpen: false)
            }
            buffered.removeFirst(headEnd + 4)
            if (100..<200).contains(head.status) && head.status != 101 { continue }
            return try readBody(of: head, after: buffered, from: transport, deadline: deadline)
        }
    }

    /// Reads until `buffered` holds a whole head; returns where it ends, or
    /// nil if the connection closed first.
    private func readHead(into buffered: inout [UInt8], from transport: any ByteTransport,
                          deadline: ContinuousClock.Instant) throws -> Int? {
        // Each pass adds at least one byte, or ends.
        while true {
            if let end = Self.find([13, 10, 13, 10], in: buffered) { return end }
            guard buffered.count < Self.headBytesMax else { throw TransportError("the answer's head is too large") }
            let bytes = try transport.receive(upTo: Self.receiveBytesMax, deadline: deadline)
            if bytes.isEmpty { return nil }
            buffered += bytes
        }
    }

    private func readBody(of head: ResponseHead, after start: [UInt8], from transport: any ByteTransport,
                          deadline: ContinuousClock.Instant) throws -> Exchange {
        func answer(_ body: [UInt8], complete: Bool) -> Exchange {
            .answered(.response(status: head.status, retryAfter: head.retryAfter, body: Data(body)),
                      keepOpen: complete && head.keepsOpen)
        }
        if head.status == 204 || head.status == 304 { return answer([], complete: start.isEmpty) }
        if head.chunked {
            var decoder = ChunkedBody(limit: answerBytesMax)
            var input = start
            // Each pass feeds what arrived; ends at the last chunk, the limit or a close.
            while true {
                switch try decoder.feed(&input) {
                case .done: return answer(decoder.body, complete: input.isEmpty)
                case .cut: return answer(decoder.body, complete: false)
                case .more: break
                }
                let bytes = try transport.receive(upTo: Self.receiveBytesMax, deadline: deadline)
                if bytes.isEmpty { return .answered(.failure("the answer ended early"), keepOpen: false) }
                input += bytes
            }
        }
        var body = start
        let wanted = head.contentLength ?? Int.max
        // Each pass adds at least one byte; ends at the length, the limit or a close.
        while body.count < min(wanted, answerBytesMax + 1) {
            let bytes = try transport.receive(upTo: Self.receiveBytesMax, deadline: deadline)
            if bytes.isEmpty {
                guard head.contentLength == nil else { return .answered(.failure("the answer ended early"), keepOpen: false) }
                break
            }
            body += bytes
        }
        let complete = head.contentLength == body.count
        return answer(Array(body.prefix(min(wanted, answerBytesMax))), complete: complete)
    }

    static func find(_ needle: [UInt8], in haystack: [UInt8]) -> Int? {
        guard haystack.count >= needle.count else { return nil }
        return (0...(haystack.count - needle.count)).first { haystack[$0..<($0 + needle.count)].elementsEqual(needle) }
    }
}

/// An answer's status line and the headers that frame it.
struct ResponseHead {
    var status: Int
    var contentLength: Int?
    var chunked = false
    var keepsOpen: Bool
    var retryAfter: String?

    init?(_ bytes: [UInt8]) {
        let lines = String(decoding: bytes, as: UTF8.self).split(separator: "\r\n", omittingEmptySubsequences: false)
        let statusLine = lines.first?.split(separator: " ", maxSplits: 2) ?? []
        guard statusLine.count >= 2, statusLine[0].hasPrefix("HTTP/1."), statusLine[1].count == 3,
              let status = Int(statusLine[1]) else { return nil }
        self.status = status
        var keepsOpen = statusLine[0] == "HTTP/1.1"
        for line in lines.dropFirst() {
            guard let colon = line.firstIndex(of: ":") else { continue }
            let name = line[..<colon].lowercased()
            let value = line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
            switch name {
            case "content-length":
                guard let length = Int(value), length >= 0, contentLength == nil || contentLength == length else { return nil }
                contentLength = length
            case "transfer-encoding": chunked = value.lowercased().hasSuffix("chunked")
            case "connection": keepsOpen = keepsOpen && !value.lowercased().contains("close")
            case "retry-after": retryAfter = value
            default: break
            }
        }
        self.keepsOpen = keepsOpen
    }
}

/// Decodes a chunked body as it arrives, keeping up to `limit` bytes.
struct ChunkedBody {
    enum Step { case more, done, cut }

    let limit: Int
    private(set) var body: [UInt8] = []
    /// Bytes of the current chunk still to come, and whether its CRLF is.
    private var remaining = 0
    private var inChunk = false
    private var finished = false

    init(limit: Int) {
        self.limit = limit
    }

    /// Takes what it can from `input`, leaving what follows the body.
    mutating func feed(_ input: inout [UInt8]) throws -> Step {
        // Each pass consumes a size line, chunk bytes or a trailer line, or waits for more.
        while true {
            if inChunk {
                let take = min(remaining, input.count)
                body += input.prefix(take)
                input.removeFirst(take)
                remaining -= take
                if body.count > limit {
                    body.removeLast(body.count - limit)
                    return .cut
                }
                guard remaining == 0, input.count >= 2 else { return .more }
                guard input[0] == 13, input[1] == 10 else { throw TransportError("a chunk does not end in CRLF") }
                input.removeFirst(2)
                inChunk = false
                continue
            }
            guard let end = KeptHTTPClient.find([13, 10], in: input) else {
                guard input.count < 1024 else { throw TransportError("a chunk size line is too long") }
                return .more
            }
            let line = String(decoding: input[..<end], as: UTF8.self)
            input.removeFirst(end + 2)
            if finished {
                // Trailers end with an empty line.
                if line.isEmpty { return .done }
                continue
            }
            guard let size = Int(line.split(separator: ";").first?.trimmingCharacters(in: .whitespaces) ?? "", radix: 16),
                  size >= 0 else { throw TransportError("a chunk size is not hexadecimal") }
            if size == 0 {
                finished = true
            } else {
                remaining = size
                inChunk = true
            }
        }
    }
}
