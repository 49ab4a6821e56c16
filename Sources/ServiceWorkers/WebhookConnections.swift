package import Crypto
package import StoreHTTP

/// Opens the webhook sender's connections: TCP, with TLS over it for an
/// `https` endpoint (its certificate checked against the system's trust
/// store, for the URL's host).
package struct WebhookConnector: Sendable {
    /// Made once; should OpenSSL fail to make it, only `https` endpoints fail.
    let tls: Result<TLSClientContext, TLSError>

    package init(tls: Result<TLSClientContext, TLSError> = Result { () throws(TLSError) in try TLSClientContext() }) {
        self.tls = tls
    }

    package func connect(_ origin: KeptHTTPClient.Origin, deadline: ContinuousClock.Instant) throws -> any ByteTransport {
        let tcp = try TCPConnection.open(host: origin.host, port: origin.port, deadline: deadline)
        guard origin.secure else { return tcp }
        return try TLSTransport(over: tcp, context: tls.get(), host: origin.host, deadline: deadline)
    }
}

/// TLS over a TCP connection, which it owns.
final class TLSTransport: ByteTransport {
    private let tcp: TCPConnection
    private let channel: TLSChannel

    init(over tcp: TCPConnection, context: TLSClientContext, host: String, deadline: ContinuousClock.Instant) throws {
        self.tcp = tcp
        channel = try TLSChannel(context: context, host: host, deadline: deadline,
                                 send: { bytes, deadline in try tcp.send(bytes, deadline: deadline) },
                                 receive: { count, deadline in try tcp.receive(upTo: count, deadline: deadline) })
    }

    func send(_ bytes: [UInt8], deadline: ContinuousClock.Instant) throws {
        try channel.write(bytes, deadline: deadline)
    }

    func receive(upTo count: Int, deadline: ContinuousClock.Instant) throws -> [UInt8] {
        try channel.read(upTo: count, deadline: deadline)
    }

    var isIdle: Bool { tcp.isIdle }
}
