import HTTPServer
public import JSON

#if canImport(Glibc)
import Glibc
#endif

/// One HTTP response as read off the wire.
public struct HTTPTestResponse: Sendable {
    public let status: Int
    public let headers: [(name: String, value: String)]
    public let body: [UInt8]

    /// The first value of header `name`, compared case-insensitively.
    public func header(_ name: String) -> String? {
        headers.first { $0.name.lowercased() == name.lowercased() }?.value
    }

    public var text: String { String(decoding: body, as: UTF8.self) }

    /// The body parsed as strict JSON.
    public func json() throws -> JSONValue { try JSONParser.parse(body) }
}

public enum HTTPTestClientError: Error, Equatable {
    case connectFailed(errno: Int32)
    case sendFailed(errno: Int32)
    case receiveFailed(errno: Int32)
    case timedOut
    /// The server closed the connection before a complete response.
    case closedByPeer
    case malformedResponse(String)
}

/// A deliberately small HTTP/1.1 client over a raw blocking socket, so tests
/// control every byte: partial requests, stalls, pipelining, resets.
///
/// Every wait has a deadline (`timeoutSeconds`). One connection is kept
/// across requests (keep-alive). Not thread-safe: use one client per thread.
public final class HTTPTestClient {
    public let port: UInt16
    public var timeoutSeconds: Double
    private var socket: Int32
    /// Bytes received but not yet consumed by a response.
    private var pending: [UInt8] = []

    /// - Parameter sourceHost: The local address to connect from, such as
    ///   another address of loopback's 127/8; the kernel's choice when nil.
    public init(port: UInt16, host: String = "127.0.0.1", sourceHost: String? = nil, timeoutSeconds: Double = 5) throws {
        self.port = port
        self.timeoutSeconds = timeoutSeconds
        socket = Glibc.socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard socket >= 0 else { throw HTTPTestClientError.connectFailed(errno: errno) }
        do {
            if let sourceHost { try bind(sourceHost) }
            try connect(host: host)
        } catch {
            Glibc.close(socket)
            socket = -1
            throw error
        }
        var one: Int32 = 1
        _ = setsockopt(socket, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
    }

    deinit {
        close()
    }

    private func bind(_ host: String) throws {
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        guard inet_pton(AF_INET, host, &address.sin_addr) == 1 else {
            throw HTTPTestClientError.connectFailed(errno: EINVAL)
        }
        let result = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                Glibc.bind(socket, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        guard result == 0 else { throw HTTPTestClientError.connectFailed(errno: errno) }
    }

    private func connect(host: String) throws {
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = port.bigEndian
        guard inet_pton(AF_INET, host, &address.sin_addr) == 1 else {
            throw HTTPTestClientError.connectFailed(errno: EINVAL)
        }
        // Non-blocking connect, so the timeout bounds it, then back to blocking.
        let flags = fcntl(socket, F_GETFL)
        _ = fcntl(socket, F_SETFL, flags | O_NONBLOCK)
        let result = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                Glibc.connect(socket, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        if result != 0 {
            guard errno == EINPROGRESS else { throw HTTPTestClientError.connectFailed(errno: errno) }
            guard try waitFor(Int16(POLLOUT), until: deadline()) else { throw HTTPTestClientError.timedOut }
            var error: Int32 = 0
            var length = socklen_t(MemoryLayout<Int32>.size)
            _ = getsockopt(socket, SOL_SOCKET, SO_ERROR, &error, &length)
            guard error == 0 else { throw HTTPTestClientError.connectFailed(errno: error) }
        }
        _ = fcntl(socket, F_SETFL, flags)
    }

    /// Closes the connection normally (FIN).
    public func close() {
        guard socket >= 0 else { return }
        Glibc.close(socket)
        socket = -1
    }

    /// Closes the connection with a TCP reset, as a crashing client would.
    public func reset() {
        guard socket >= 0 else { return }
        var linger = Glibc.linger(l_onoff: 1, l_linger: 0)
        _ = setsockopt(socket, SOL_SOCKET, SO_LINGER, &linger, socklen_t(MemoryLayout<Glibc.linger>.size))
        close()
    }

    // MARK: Sending

    public func send(_ text: String) throws {
        try send(Array(text.utf8))
    }

    public func send(_ bytes: [UInt8]) throws {
        let until = deadline()
        var offset = 0
        while offset < bytes.count {
            let sent = bytes.withUnsafeBytes { buffer in
                Glibc.send(socket, buffer.baseAddress! + offset, buffer.count - offset, Int32(MSG_NOSIGNAL | MSG_DONTWAIT))
            }
            if sent > 0 {
                offset += sent
            } else if sent < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) {
                guard try waitFor(Int16(POLLOUT), until: until) else { throw HTTPTestClientError.timedOut }
            } else {
                throw HTTPTestClientError.sendFailed(errno: errno)
            }
        }
    }

    /// Sends a request with `Host` and, for a body, `Content-Length` added
    /// unless given, then reads the response.
    public func request(
        method: String,
        path: String,
        headers: [(name: String, value: String)] = [],
        body: [UInt8] = []
    ) throws -> HTTPTestResponse {
        try send(Self.requestBytes(method: method, path: path, headers: headers, body: body, port: port))
        return try readResponse()
    }

    public static func requestBytes(
        method: String,
        path: String,
        headers: [(name: String, value: String)] = [],
        body: [UInt8] = [],
        port: UInt16
    ) -> [UInt8] {
        var text = "\(method) \(path) HTTP/1.1\r\n"
        let names = Set(headers.map { $0.name.lowercased() })
        if !names.contains("host") { text += "Host: 127.0.0.1:\(port)\r\n" }
        if !body.isEmpty && !names.contains("content-length") && !names.contains("transfer-encoding") {
            text += "Content-Length: \(body.count)\r\n"
        }
        for (name, value) in headers { text += "\(name): \(value)\r\n" }
        text += "\r\n"
        return Array(text.utf8) + body
    }

    // MARK: Receiving

    /// Reads one response, honouring `Content-Length` (or chunked coding, or
    /// end of stream when neither is present).
    public func readResponse() throws -> HTTPTestResponse {
        let until = deadline()
        var headerEnd = Self.find([13, 10, 13, 10], in: pending)
        while headerEnd == nil {
            guard try receive(until: until) else { throw HTTPTestClientError.closedByPeer }
            headerEnd = Self.find([13, 10, 13, 10], in: pending)
        }
        let head = String(decoding: pending[..<headerEnd!], as: UTF8.self)
        pending.removeFirst(headerEnd! + 4)

        var lines = head.split(separator: "\r\n", omittingEmptySubsequences: false).map(String.init)
        let statusLine = lines.removeFirst()
        let statusParts = statusLine.split(separator: " ", maxSplits: 2)
        guard statusParts.count >= 2, statusParts[0].hasPrefix("HTTP/1."), let status = Int(statusParts[1]) else {
            throw HTTPTestClientError.malformedResponse(statusLine)
        }
        var headers: [(name: String, value: String)] = []
        for line in lines {
            guard let colon = line.firstIndex(of: ":") else { throw HTTPTestClientError.malformedResponse(line) }
            let value = line[line.index(after: colon)...].drop { $0 == " " || $0 == "\t" }
            headers.append((String(line[..<colon]), String(value)))
        }
        let response = HTTPTestResponse(status: status, headers: headers, body: [])

        let body: [UInt8]
        if let length = response.header("Content-Length").flatMap(Int.init) {
            while pending.count < length {
                guard try receive(until: until) else { throw HTTPTestClientError.closedByPeer }
            }
            body = Array(pending[..<length])
            pending.removeFirst(length)
        } else if response.header("Transfer-Encoding")?.lowercased() == "chunked" {
            body = try readChunked(until: until)
        } else if status == 204 || status == 304 || (100..<200).contains(status) {
            body = []
        } else {
            while try receive(until: until) {}
            body = pending
            pending = []
        }
        return HTTPTestResponse(status: status, headers: headers, body: body)
    }

    private func readChunked(until: Double) throws -> [UInt8] {
        var body: [UInt8] = []
        while true {
            var lineEnd = Self.find([13, 10], in: pending)
            while lineEnd == nil {
                guard try receive(until: until) else { throw HTTPTestClientError.closedByPeer }
                lineEnd = Self.find([13, 10], in: pending)
            }
            let sizeText = String(decoding: pending[..<lineEnd!], as: UTF8.self).split(separator: ";").first ?? ""
            guard let size = Int(sizeText.trimmingCharacters(), radix: 16) else {
                throw HTTPTestClientError.malformedResponse("chunk size \(sizeText)")
            }
            pending.removeFirst(lineEnd! + 2)
            while pending.count < size + 2 {
                guard try receive(until: until) else { throw HTTPTestClientError.closedByPeer }
            }
            if size == 0 {
                pending.removeFirst(2)  // no trailers are sent by the server under test
                return body
            }
            body += pending[..<size]
            pending.removeFirst(size + 2)
        }
    }

    /// Waits until the server closes the connection (end of stream or reset).
    /// Data that arrives meanwhile is kept for `readResponse`. Returns false
    /// if the connection is still open after `seconds`.
    public func waitForClose(seconds: Double) -> Bool {
        let until = Self.now() + seconds
        while true {
            do {
                guard try receive(until: until) else { return true }
            } catch HTTPTestClientError.receiveFailed {
                return true
            } catch {
                return false
            }
        }
    }

    /// Whether response bytes (or the end of the stream) are ready to read
    /// within `seconds`.
    public func isReadable(within seconds: Double) -> Bool {
        guard pending.isEmpty else { return true }
        return (try? waitFor(Int16(POLLIN), until: Self.now() + seconds)) ?? true
    }

    /// Reads what is available into `pending`. False at end of stream.
    private func receive(until: Double) throws -> Bool {
        guard try waitFor(Int16(POLLIN), until: until) else { throw HTTPTestClientError.timedOut }
        var chunk = [UInt8](repeating: 0, count: 64 << 10)
        let count = chunk.withUnsafeMutableBytes { Glibc.recv(socket, $0.baseAddress, $0.count, 0) }
        if count < 0 { throw HTTPTestClientError.receiveFailed(errno: errno) }
        if count == 0 { return false }
        pending += chunk[..<count]
        return true
    }

    /// Polls for `events`; false when the deadline passes first.
    private func waitFor(_ events: Int16, until: Double) throws -> Bool {
        while true {
            let remainingMilliseconds = Int32(max(0, (until - Self.now()) * 1000).rounded(.up))
            var descriptor = pollfd(fd: socket, events: events, revents: 0)
            let ready = poll(&descriptor, 1, remainingMilliseconds)
            if ready > 0 { return true }
            if ready == 0 { return false }
            if errno != EINTR { throw HTTPTestClientError.receiveFailed(errno: errno) }
        }
    }

    private func deadline() -> Double {
        Self.now() + timeoutSeconds
    }

    /// Monotonic seconds.
    public static func now() -> Double {
        var time = timespec()
        clock_gettime(CLOCK_MONOTONIC, &time)
        return Double(time.tv_sec) + Double(time.tv_nsec) / 1e9
    }

    private static func find(_ needle: [UInt8], in haystack: [UInt8]) -> Int? {
        guard haystack.count >= needle.count else { return nil }
        for start in 0...(haystack.count - needle.count) where haystack[start] == needle[0] {
            if haystack[start..<(start + needle.count)].elementsEqual(needle) { return start }
        }
        return nil
    }
}

private extension Substring {
    func trimmingCharacters() -> String {
        String(drop { $0 == " " }.reversed().drop { $0 == " " }.reversed())
    }
}
