public import Foundation
import Locking
#if canImport(Glibc)
import Glibc
#endif

/// A stand-in for Apple's verifyReceipt endpoint on a real loopback socket
/// (127.0.0.1, a port the kernel picks). A thread accepts connections one at
/// a time, reads one HTTP/1.1 request with a Content-Length body, records
/// it, answers with the canned reply and closes the connection.
public final class FakeVerifyReceiptServer: @unchecked Sendable {
    public enum Reply: Sendable {
        /// HTTP 200 with this JSON body.
        case json(String)
        /// Any status line and body, as given.
        case http(status: Int, headers: [String] = [], body: String)
        /// Exactly these bytes, status line and headers included, then close.
        case raw(String)
        /// Read the request, then answer nothing until the server stops.
        case silence
        /// Whatever `decide` answers for the request, on the server's thread
        /// (a webhook receiver's checks; it may take its time).
        case decided(_ decide: @Sendable (Request) -> Reply)
    }

    public struct Request: Sendable {
        public let method: String
        public let path: String
        /// Header names in lowercase.
        public let headers: [String: String]
        public let body: Data

        /// The body as a JSON object, or nil if it is not one.
        public var json: [String: Any]? {
            (try? JSONSerialization.jsonObject(with: body)) as? [String: Any]
        }
    }

    public enum SetupError: Error {
        case socket(String)
    }

    /// How long a server may live at most by default, so a test that
    /// forgets to stop it cannot leave a thread behind for ever.
    public static let lifetimeSecondsMax = 60.0
    private let lifetimeSeconds: Double
    public static let requestBytesMax = 8 << 20
    public static let pollMilliseconds: Int32 = 20

    public let port: UInt16
    public var url: URL { URL(string: "http://127.0.0.1:\(port)/verifyReceipt")! }

    private let listener: Int32
    private let reply: Reply
    private let lock = NSLock()
    private var recorded: [Request] = []
    private let stopRequested = Monitor(false)
    private let exited = DispatchSemaphore(value: 0)

    public init(reply: Reply, lifetimeSeconds: Double = FakeVerifyReceiptServer.lifetimeSecondsMax) throws {
        self.reply = reply
        self.lifetimeSeconds = lifetimeSeconds
        (listener, port) = try Self.bindLoopback(listen: true)
        let thread = Thread { [self] in
            serve()
            close(listener)
            exited.signal()
        }
        thread.start()
    }

    /// The requests received so far.
    public var requests: [Request] {
        lock.withLock { recorded }
    }

    /// Stops accepting, ends a silent reply, and waits for the thread.
    public func stop() {
        stopRequested.withLock { $0 = true }
        stopRequested.broadcast()
        _ = exited.wait(timeout: .now() + 5)
    }

    private var isStopping: Bool {
        stopRequested.withLock { $0 }
    }

    // MARK: - Sockets

    /// A TCP socket bound to 127.0.0.1 on a kernel-chosen port, listening or
    /// not. A socket that is bound but not listening refuses connections,
    /// and holding it keeps the port from being reused meanwhile.
    public static func bindLoopback(listen shouldListen: Bool) throws -> (descriptor: Int32, port: UInt16) {
        let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard descriptor >= 0 else { throw SetupError.socket("socket: errno \(errno)") }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = 0
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(descriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        guard bound == 0 else {
            close(descriptor)
            throw SetupError.socket("bind: errno \(errno)")
        }
        if shouldListen {
            guard listen(descriptor, 16) == 0 else {
                close(descriptor)
                throw SetupError.socket("listen: errno \(errno)")
            }
        }
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let named = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(descriptor, $0, &length) }
        }
        guard named == 0 else {
            close(descriptor)
            throw SetupError.socket("getsockname: errno \(errno)")
        }
        return (descriptor, UInt16(bigEndian: address.sin_port))
    }

    /// Waits up to one poll interval for `descriptor` to become readable.
    private static func readable(_ descriptor: Int32) -> Bool {
        var entry = pollfd(fd: descriptor, events: Int16(POLLIN), revents: 0)
        return poll(&entry, 1, pollMilliseconds) > 0
    }

    private func serve() {
        let end = Date().addingTimeInterval(lifetimeSeconds)
        // Bounded by the lifetime.
        while !isStopping, Date() < end {
            guard Self.readable(listener) else { continue }
            let connection = accept(listener, nil, nil)
            guard connection >= 0 else { continue }
            handle(connection, until: end)
            close(connection)
        }
    }

    private func handle(_ connection: Int32, until end: Date) {
        guard let request = read(connection, until: end) else { return }
        lock.withLock { recorded.append(request) }
        answer(reply, to: request, on: connection, until: end)
    }

    private func answer(_ reply: Reply, to request: Request, on connection: Int32, until end: Date) {
        switch reply {
        case .json(let body):
            write(connection, Self.response(status: 200, headers: ["Content-Type: application/json"], body: body))
        case .http(let status, let headers, let body):
            write(connection, Self.response(status: status, headers: headers, body: body))
        case .raw(let text):
            write(connection, Array(text.utf8))
        case .silence:
            // Until the server stops, bounded by the lifetime.
            stopRequested.wait(until: .now + .seconds(max(0, end.timeIntervalSinceNow))) { $0 }
        case .decided(let decide):
            answer(decide(request), to: request, on: connection, until: end)
        }
    }

    /// Reads one request: the head up to the blank line, then exactly
    /// Content-Length bytes of body.
    private func read(_ connection: Int32, until end: Date) -> Request? {
        var bytes: [UInt8] = []
        var headEnd: Int?
        var expectedTotal: Int?
        var sentContinue = false
        var chunk = [UInt8](repeating: 0, count: 64 * 1024)
        // Bounded by the lifetime and by requestBytesMax.
        while !isStopping, Date() < end, bytes.count <= Self.requestBytesMax {
            if let headEnd, let expectedTotal, bytes.count >= expectedTotal {
                return Self.parse(Array(bytes[..<headEnd]), body: Array(bytes[(headEnd + 4)..<expectedTotal]))
            }
            guard Self.readable(connection) else { continue }
            let count = recv(connection, &chunk, chunk.count, 0)
            guard count > 0 else { return nil }
            bytes += chunk[..<count]
            if headEnd == nil, let found = Self.find([13, 10, 13, 10], in: bytes) {
                headEnd = found
                let head = Self.parse(Array(bytes[..<found]), body: [])
                let length = head.flatMap { Int($0.headers["content-length"] ?? "0") } ?? 0
                expectedTotal = found + 4 + length
                if !sentContinue, head?.headers["expect"]?.lowercased() == "100-continue" {
                    write(connection, Array("HTTP/1.1 100 Continue\r\n\r\n".utf8))
                    sentContinue = true
                }
            }
        }
        return nil
    }

    private static func parse(_ head: [UInt8], body: [UInt8]) -> Request? {
        let lines = String(decoding: head, as: UTF8.self).components(separatedBy: "\r\n")
        let requestLine = lines.first?.split(separator: " ") ?? []
        guard requestLine.count == 3 else { return nil }
        var headers: [String: String] = [:]
        for line in lines.dropFirst() {
            guard let colon = line.firstIndex(of: ":") else { continue }
            let name = line[..<colon].lowercased()
            headers[name] = line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
        }
        return Request(method: String(requestLine[0]), path: String(requestLine[1]), headers: headers, body: Data(body))
    }

    private static func find(_ needle: [UInt8], in haystack: [UInt8]) -> Int? {
        guard haystack.count >= needle.count else { return nil }
        return (0...(haystack.count - needle.count)).first { start in
            needle.indices.allSatisfy { haystack[start + $0] == needle[$0] }
        }
    }

    private static func response(status: Int, headers: [String], body: String) -> [UInt8] {
        let bodyBytes = Array(body.utf8)
        var head = "HTTP/1.1 \(status) Canned\r\n"
        for header in headers { head += header + "\r\n" }
        head += "Content-Length: \(bodyBytes.count)\r\nConnection: close\r\n\r\n"
        return Array(head.utf8) + bodyBytes
    }

    private func write(_ connection: Int32, _ bytes: [UInt8]) {
        var offset = 0
        // Bounded: each pass sends at least one byte or stops.
        while offset < bytes.count {
            let sent = bytes[offset...].withUnsafeBytes { send(connection, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            guard sent > 0 else { return }
            offset += sent
        }
    }
}
