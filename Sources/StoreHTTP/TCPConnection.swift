import Dispatch
import Locking
#if canImport(Glibc)
import Glibc
#endif

/// Why bytes could not be carried, in words for logs.
public struct TransportError: Error, CustomStringConvertible, Sendable {
    public let description: String

    public init(_ description: String) {
        self.description = description
    }

    static let timedOut = TransportError("no answer within the time limit")
}

/// A connection that carries a request's bytes and its answer's: plain TCP,
/// or TLS over it. Each call is bounded by its deadline.
public protocol ByteTransport: AnyObject {
    /// Sends all of `bytes` before `deadline`.
    func send(_ bytes: [UInt8], deadline: ContinuousClock.Instant) throws
    /// Up to `count` bytes, at least one, before `deadline`; none when the
    /// peer has closed the connection.
    func receive(upTo count: Int, deadline: ContinuousClock.Instant) throws -> [UInt8]
    /// Still open with nothing unread: fit to carry another request.
    var isIdle: Bool { get }
}

/// A TCP connection on a non-blocking socket, closed when released. Every
/// wait is a `poll` bounded by the caller's deadline; writes never raise
/// SIGPIPE.
public final class TCPConnection: ByteTransport {
    private let descriptor: Int32
    /// Bytes were just sent: an answer takes a round trip, so the next
    /// receive waits first instead of finding nothing.
    private var answerPending = false

    private init(descriptor: Int32) {
        self.descriptor = descriptor
    }

    deinit {
        close(descriptor)
    }

    /// Resolves `host` and connects to its first address that answers,
    /// all before `deadline`.
    public static func open(host: String, port: Int, deadline: ContinuousClock.Instant) throws -> TCPConnection {
        var lastFailure = "\(host) has no address"
        for address in try resolve(host: host, port: port, deadline: deadline) {
            let descriptor = socket(address.family, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue)
                                        | Int32(SOCK_CLOEXEC.rawValue), 0)
            guard descriptor >= 0 else { throw TransportError("no socket (errno \(errno))") }
            let connection = TCPConnection(descriptor: descriptor)
            var one: Int32 = 1
            _ = setsockopt(descriptor, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
            let started = address.bytes.withUnsafeBytes {
                connect(descriptor, $0.baseAddress!.assumingMemoryBound(to: sockaddr.self), address.length)
            }
            if started == 0 { return connection }
            guard errno == EINPROGRESS else {
                lastFailure = "connecting to \(host):\(port) failed (errno \(errno))"
                continue
            }
            try connection.wait(for: Int16(POLLOUT), until: deadline)
            var failure: Int32 = 0
            var length = socklen_t(MemoryLayout<Int32>.size)
            guard getsockopt(descriptor, SOL_SOCKET, SO_ERROR, &failure, &length) == 0, failure == 0 else {
                lastFailure = "connecting to \(host):\(port) failed (errno \(failure))"
                continue
            }
            return connection
        }
        throw TransportError(lastFailure)
    }

    public func send(_ bytes: [UInt8], deadline: ContinuousClock.Instant) throws {
        var offset = 0
        // Each pass sends at least one byte, or waits for room until the deadline.
        while offset < bytes.count {
            let sent = bytes.withUnsafeBytes {
                Glibc.send(descriptor, $0.baseAddress! + offset, $0.count - offset, Int32(MSG_NOSIGNAL))
            }
            if sent > 0 {
                offset += sent
            } else if errno == EAGAIN || errno == EINTR {
                try wait(for: Int16(POLLOUT), until: deadline)
            } else {
                throw TransportError("sending failed (errno \(errno))")
            }
        }
        answerPending = true
    }

    public func receive(upTo count: Int, deadline: ContinuousClock.Instant) throws -> [UInt8] {
        var buffer = [UInt8](repeating: 0, count: max(1, count))
        if answerPending {
            answerPending = false
            try wait(for: Int16(POLLIN), until: deadline)
        }
        // Each pass reads, or waits for bytes until the deadline.
        while true {
            let read = buffer.withUnsafeMutableBytes { recv(descriptor, $0.baseAddress!, $0.count, 0) }
            if read >= 0 { return Array(buffer.prefix(read)) }
            guard errno == EAGAIN || errno == EINTR else {
                throw TransportError(errno == ECONNRESET ? "the connection was reset" : "receiving failed (errno \(errno))")
            }
            try wait(for: Int16(POLLIN), until: deadline)
        }
    }

    public var isIdle: Bool {
        var entry = pollfd(fd: descriptor, events: Int16(POLLIN), revents: 0)
        return poll(&entry, 1, 0) == 0
    }

    /// Waits until the socket is ready for `events`, or throws at `deadline`.
    private func wait(for events: Int16, until deadline: ContinuousClock.Instant) throws {
        // Each pass waits out the time left; EINTR starts the next.
        while true {
            let left = ContinuousClock.now.duration(to: deadline)
            guard left > .zero else { throw TransportError.timedOut }
            let milliseconds = Int32(min(left.components.seconds * 1000 + left.components.attoseconds / 1_000_000_000_000_000 + 1,
                                         Int64(Int32.max)))
            var entry = pollfd(fd: descriptor, events: events, revents: 0)
            let ready = poll(&entry, 1, milliseconds)
            if ready > 0 { return }
            if ready < 0 && errno != EINTR { throw TransportError("waiting on the socket failed (errno \(errno))") }
        }
    }

    private struct Address: Sendable {
        var family: Int32
        var bytes: [UInt8]
        var length: socklen_t
    }

    /// The addresses of `host`, a name or an IP literal. A name is looked up
    /// on a thread of its own: `getaddrinfo` takes no time limit, so the
    /// caller waits for it only until `deadline`.
    private static func resolve(host: String, port: Int, deadline: ContinuousClock.Instant) throws -> [Address] {
        if let numeric = try? lookUp(host: host, port: port, flags: AI_NUMERICHOST) { return numeric }
        let answer = Monitor<Result<[Address], TransportError>?>(nil)
        DispatchQueue.global().async {
            let found = Result { () throws(TransportError) in try lookUp(host: host, port: port, flags: 0) }
            answer.withLock { $0 = found }
            answer.broadcast()
        }
        guard let found = answer.wait(until: deadline, for: { $0 != nil }, then: { state, _ in state }) else {
            throw TransportError("\(host) was not resolved within the time limit")
        }
        return try found.get()
    }

    private static func lookUp(host: String, port: Int, flags: Int32) throws(TransportError) -> [Address] {
        var hints = addrinfo()
        hints.ai_family = AF_UNSPEC
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        hints.ai_flags = flags | AI_NUMERICSERV
        var list: UnsafeMutablePointer<addrinfo>?
        let status = getaddrinfo(host, String(port), &hints, &list)
        guard status == 0, let first = list else {
            throw TransportError("\(host) could not be resolved (\(String(cString: gai_strerror(status))))")
        }
        defer { freeaddrinfo(first) }
        var addresses: [Address] = []
        var next: UnsafeMutablePointer<addrinfo>? = first
        // Bounded by the list getaddrinfo returned.
        while let entry = next {
            if let address = entry.pointee.ai_addr {
                let bytes = Array(UnsafeRawBufferPointer(start: address, count: Int(entry.pointee.ai_addrlen)))
                addresses.append(Address(family: entry.pointee.ai_family, bytes: bytes, length: entry.pointee.ai_addrlen))
            }
            next = entry.pointee.ai_next
        }
        return addresses
    }
}
