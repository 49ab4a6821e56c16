import COpenSSL
public import Crypto
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// An HTTPS server on 127.0.0.1 (a port the kernel picks) presenting a
/// given certificate, for a TLS client's tests. Each connection has a
/// thread; it answers every request (a head and a Content-Length body)
/// `204`, keeping the connection open until the client closes it, and
/// counts connections, handshakes and requests.
public final class LoopbackTLSServer: @unchecked Sendable {
    public struct Counts: Sendable, Equatable {
        public var connections = 0
        public var handshakes = 0
        public var requests = 0

        public init(connections: Int = 0, handshakes: Int = 0, requests: Int = 0) {
            (self.connections, self.handshakes, self.requests) = (connections, handshakes, requests)
        }
    }

    public let port: UInt16
    private let context: OpaquePointer
    private let listener: Int32
    private let state = NSLock()
    private var counted = Counts()
    private var stopped = false
    /// Each connection waits this long for the client's next bytes, then
    /// closes (as a server ends an idle kept-alive connection).
    private let idleSeconds: Double

    public init(chain: [Certificate], key: PrivateKey, idleSeconds: Double = 10) throws {
        self.idleSeconds = idleSeconds
        signal(SIGPIPE, SIG_IGN)
        guard let context = SSL_CTX_new(TLS_server_method()) else { throw CertificateError("no TLS server context") }
        self.context = context
        guard let leaf = chain.first, SSL_CTX_use_certificate(context, leaf.x509) == 1,
              SSL_CTX_use_PrivateKey(context, key.pkey) == 1 else {
            SSL_CTX_free(context)
            throw CertificateError("the server certificate or key was refused", openSSLDetail: drainOpenSSLErrors())
        }
        for intermediate in chain.dropFirst() {
            X509_up_ref(intermediate.x509)
            _ = SSL_CTX_ctrl(context, SSL_CTRL_EXTRA_CHAIN_CERT, 0, UnsafeMutableRawPointer(intermediate.x509))
        }
        let listener = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        self.listener = listener
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let ready = withUnsafeMutablePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(listener, $0, length) == 0 && listen(listener, 16) == 0 && getsockname(listener, $0, &length) == 0
            }
        }
        port = UInt16(bigEndian: address.sin_port)
        guard listener >= 0, ready else {
            close(listener)
            SSL_CTX_free(context)
            throw CertificateError("no loopback listener (errno \(errno))")
        }
        Thread { [self] in accepting() }.start()
    }

    deinit {
        SSL_CTX_free(context)
    }

    public var counts: Counts {
        state.withLock { counted }
    }

    /// Stops accepting; connections end when their clients close them or
    /// after the idle time.
    public func stop() {
        state.withLock { stopped = true }
        shutdown(listener, Int32(SHUT_RDWR))
    }

    private func accepting() {
        // Ends when `stop` shuts the listener down.
        while true {
            let connection = accept(listener, nil, nil)
            guard connection >= 0 else {
                if errno == EINTR { continue }
                break
            }
            let open = state.withLock { () -> Bool in
                if !stopped { counted.connections += 1 }
                return !stopped
            }
            guard open else {
                close(connection)
                break
            }
            Thread { [self] in serve(connection) }.start()
        }
        close(listener)
    }

    private func serve(_ connection: Int32) {
        defer { close(connection) }
        var limit = timeval(tv_sec: Int(idleSeconds), tv_usec: Int(idleSeconds.truncatingRemainder(dividingBy: 1) * 1e6))
        setsockopt(connection, SOL_SOCKET, SO_RCVTIMEO, &limit, socklen_t(MemoryLayout<timeval>.size))
        setsockopt(connection, SOL_SOCKET, SO_SNDTIMEO, &limit, socklen_t(MemoryLayout<timeval>.size))
        guard let ssl = SSL_new(context) else { return }
        defer { SSL_free(ssl) }
        SSL_set_fd(ssl, connection)
        guard SSL_accept(ssl) == 1 else { return }
        state.withLock { counted.handshakes += 1 }
        var buffered: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 16 * 1024)
        // One request per pass, until the client closes or goes quiet.
        while true {
            guard let headEnd = Self.headEnd(buffered) else {
                let read = chunk.withUnsafeMutableBytes { SSL_read(ssl, $0.baseAddress, Int32($0.count)) }
                guard read > 0, buffered.count < 1 << 20 else { return }
                buffered += chunk.prefix(Int(read))
                continue
            }
            let head = String(decoding: buffered[..<headEnd], as: UTF8.self).lowercased()
            let length = head.split(separator: "\r\n").first { $0.hasPrefix("content-length:") }
                .flatMap { Int($0.dropFirst("content-length:".count).trimmingCharacters(in: .whitespaces)) } ?? 0
            guard buffered.count >= headEnd + 4 + length else {
                let read = chunk.withUnsafeMutableBytes { SSL_read(ssl, $0.baseAddress, Int32($0.count)) }
                guard read > 0 else { return }
                buffered += chunk.prefix(Int(read))
                continue
            }
            buffered.removeFirst(headEnd + 4 + length)
            state.withLock { counted.requests += 1 }
            let answer = Array("HTTP/1.1 204 No Content\r\nServer: loopback-tls\r\n\r\n".utf8)
            guard SSL_write(ssl, answer, Int32(answer.count)) == Int32(answer.count) else { return }
        }
    }

    private static func headEnd(_ bytes: [UInt8]) -> Int? {
        guard bytes.count >= 4 else { return nil }
        return (0...(bytes.count - 4)).first { bytes[$0] == 13 && bytes[$0 + 1] == 10 && bytes[$0 + 2] == 13 && bytes[$0 + 3] == 10 }
    }
}
