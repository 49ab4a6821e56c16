import COpenSSL

/// Why a TLS connection failed, in words for logs.
public struct TLSError: Error, CustomStringConvertible, Sendable {
    public let description: String

    init(_ description: String) {
        self.description = description
    }
}

/// What TLS client connections share: TLS 1.2 at least, the peer's
/// certificate checked against the system's trust store (or the file and
/// directory that `SSL_CERT_FILE` and `SSL_CERT_DIR` name, as OpenSSL reads
/// them), or against the roots of one PEM file only. Configured once, then
/// only read: safe to share between threads.
public final class TLSClientContext: @unchecked Sendable {
    fileprivate let context: OpaquePointer

    public init(trustedRootsFile: String? = nil) throws(TLSError) {
        guard let context = SSL_CTX_new(TLS_client_method()) else {
            throw TLSError("no TLS context: \(drainOpenSSLErrors())")
        }
        let trusted = trustedRootsFile.map { SSL_CTX_load_verify_locations(context, $0, nil) == 1 }
            ?? (SSL_CTX_set_default_verify_paths(context) == 1)
        guard COpenSSL_SSL_CTX_set_min_proto_version(context, TLS1_2_VERSION) == 1, trusted else {
            let reason = drainOpenSSLErrors()
            SSL_CTX_free(context)
            throw TLSError("the TLS context could not be configured: \(reason)")
        }
        SSL_CTX_set_verify(context, SSL_VERIFY_PEER, nil)
        self.context = context
    }

    deinit {
        SSL_CTX_free(context)
    }
}

/// One TLS client connection over bytes the caller carries: OpenSSL reads
/// and writes memory buffers, and `send` and `receive` move them over the
/// caller's socket, each bounded by the deadline it is given. The engine
/// itself never blocks and never touches a socket (so no SIGPIPE either).
///
/// The peer must present a chain to a trusted root whose certificate names
/// `host` (a DNS name, or an IP address literal). For one thread at a time.
public final class TLSChannel {
    /// Sends all of these bytes before the deadline, or throws.
    public typealias Send = ([UInt8], ContinuousClock.Instant) throws -> Void
    /// Up to this many bytes, at least one, before the deadline; none when
    /// the peer has closed the connection.
    public typealias Receive = (Int, ContinuousClock.Instant) throws -> [UInt8]

    /// The largest piece read from the network at once.
    static let receiveBytesMax = 16 * 1024

    private let ssl: OpaquePointer
    /// Owned by `ssl`: what came from the network, and what goes to it.
    private let incoming: OpaquePointer
    private let outgoing: OpaquePointer
    private let send: Send
    private let receive: Receive

    /// Handshakes with `host` before `deadline`.
    public init(context: TLSClientContext, host: String, deadline: ContinuousClock.Instant,
                send: @escaping Send, receive: @escaping Receive) throws {
        guard let ssl = SSL_new(context.context) else { throw TLSError("no TLS session: \(drainOpenSSLErrors())") }
        guard let incoming = BIO_new(BIO_s_mem()), let outgoing = BIO_new(BIO_s_mem()) else {
            SSL_free(ssl)
            throw TLSError("no TLS buffers: \(drainOpenSSLErrors())")
        }
        SSL_set_bio(ssl, incoming, outgoing)
        (self.ssl, self.incoming, self.outgoing, self.send, self.receive) = (ssl, incoming, outgoing, send, receive)
        // An IP literal is checked against the certificate's IP addresses;
        // a name is sent as SNI and checked against its DNS names.
        let parameters = SSL_get0_param(ssl)
        if X509_VERIFY_PARAM_set1_ip_asc(parameters, host) != 1 {
            ERR_clear_error()
            guard SSL_set1_host(ssl, host) == 1, COpenSSL_SSL_set_tlsext_host_name(ssl, host) == 1 else {
                throw TLSError("the host name \(host) cannot be checked: \(drainOpenSSLErrors())")
            }
        }
        SSL_set_connect_state(ssl)
        do {
            _ = try drive(deadline) { SSL_do_handshake($0) }
        } catch let error as TLSError {
            let verdict = SSL_get_verify_result(ssl)
            guard verdict == X509_V_OK else {
                throw TLSError("the certificate of \(host) was refused: \(String(cString: X509_verify_cert_error_string(verdict)))")
            }
            throw error
        }
    }

    deinit {
        SSL_free(ssl)
    }

    /// Sends all of `bytes` before `deadline`.
    public func write(_ bytes: [UInt8], deadline: ContinuousClock.Instant) throws {
        var offset = 0
        // Each pass writes at least one byte or throws.
        while offset < bytes.count {
            let written = try bytes.withUnsafeBufferPointer { buffer in
                try drive(deadline) { SSL_write($0, buffer.baseAddress! + offset, Int32(buffer.count - offset)) }
            }
            offset += Int(written)
        }
    }

    /// Up to `count` decrypted bytes, at least one, before `deadline`; none
    /// when the peer has closed the connection.
    public func read(upTo count: Int, deadline: ContinuousClock.Instant) throws -> [UInt8] {
        var buffer = [UInt8](repeating: 0, count: max(1, count))
        let read = try buffer.withUnsafeMutableBufferPointer { pointer in
            try drive(deadline) { SSL_read($0, pointer.baseAddress!, Int32(pointer.count)) }
        }
        return Array(buffer.prefix(Int(read)))
    }

    /// Runs `operation` until it succeeds, feeding OpenSSL what the network
    /// brings and sending what it writes. Returns its result; 0 when the
    /// peer closed the connection.
    private func drive(_ deadline: ContinuousClock.Instant, _ operation: (OpaquePointer) -> Int32) throws -> Int32 {
        // Each pass makes progress: OpenSSL moves, or bytes arrive or
        // leave before the deadline (or the call throws).
        while true {
            ERR_clear_error()
            let result = operation(ssl)
            let failure = result > 0 ? SSL_ERROR_NONE : SSL_get_error(ssl, result)
            try flush(deadline)
            switch failure {
            case SSL_ERROR_NONE:
                return result
            case SSL_ERROR_ZERO_RETURN:
                return 0
            case SSL_ERROR_WANT_READ:
                let bytes = try receive(Self.receiveBytesMax, deadline)
                if bytes.isEmpty { return 0 }
                let taken = bytes.withUnsafeBufferPointer { BIO_write(incoming, $0.baseAddress, Int32($0.count)) }
                guard taken == Int32(bytes.count) else { throw TLSError("TLS input was not buffered") }
            case SSL_ERROR_WANT_WRITE:
                continue
            default:
                throw TLSError("TLS failed: \(drainOpenSSLErrors())")
            }
        }
    }

    /// Sends whatever OpenSSL has written.
    private func flush(_ deadline: ContinuousClock.Instant) throws {
        var chunk = [UInt8](repeating: 0, count: Self.receiveBytesMax)
        // Ends when the buffer is empty; each pass takes up to one chunk.
        while BIO_ctrl_pending(outgoing) > 0 {
            let count = chunk.withUnsafeMutableBufferPointer { BIO_read(outgoing, $0.baseAddress, Int32($0.count)) }
            guard count > 0 else { break }
            try send(Array(chunk.prefix(Int(count))), deadline)
        }
    }
}
