import CMicroHTTPD
import Dispatch
import Locking
public import Logging
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// What the observer learns about each answered request.
public struct CompletedRequest: Sendable {
    public let method: String
    /// The matched route's pattern; nil when no route matched.
    public let routePattern: String?
    public let status: Int
    /// From the request line's arrival to the response being queued.
    public let durationSeconds: Double

    public init(method: String, routePattern: String?, status: Int, durationSeconds: Double) {
        self.method = method
        self.routePattern = routePattern
        self.status = status
        self.durationSeconds = durationSeconds
    }
}

public enum ServerError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The host is not a numeric IP address; the message names it.
    case invalidConfiguration(String)
    /// libmicrohttpd refused to start (for example, the port is taken); the
    /// message carries its own words.
    case startFailed(String)
    case alreadyStarted

    public var description: String {
        switch self {
        case .invalidConfiguration(let message): "invalid HTTP server configuration: \(message)"
        case .startFailed(let message): "HTTP server failed to start: \(message)"
        case .alreadyStarted: "HTTP server already started"
        }
    }
}

/// An HTTP/1.1 server on libmicrohttpd: a fixed pool of threads, each with
/// its own epoll loop, keep-alive, and suspended connections for answers that
/// arrive later.
///
/// HEAD is not routed specially: a path without a HEAD route answers 405.
public final class Server: Sendable {
    public struct Configuration: Sendable {
        /// A numeric IPv4 or IPv6 address; "0.0.0.0" or "::" for any.
        public var host: String
        /// 0 picks a free port; read ``Server/port`` after start.
        public var port: UInt16
        /// Size of the libmicrohttpd thread pool.
        public var threads: Int
        public var maxBodyBytes: Int
        /// Limit on the sum of header name and value bytes.
        public var maxHeaderBytes: Int
        public var maxConnections: Int
        /// The most connections one client address may hold open at once;
        /// nil for no limit short of `maxConnections`. libmicrohttpd closes a
        /// connection past it as soon as it is accepted, without an answer.
        public var maxConnectionsPerAddress: Int?
        /// A connection with no traffic for this long is closed.
        public var idleTimeoutSeconds: Int
        /// A request must arrive in full, headers included, this long after
        /// the connection was accepted (or, kept alive, after its request
        /// line); one still arriving then gets 408 or is cut off, and a new
        /// connection that has not sent its request line by then is closed.
        public var requestTimeoutSeconds: Int
        /// How long `shutdown()` waits for requests in flight.
        public var shutdownGraceSeconds: Int

        /// Every limit comes from the caller, which validated it once (the
        /// service's own configuration); a value out of range here is a bug.
        public init(
            host: String,
            port: UInt16,
            threads: Int,
            maxBodyBytes: Int,
            maxHeaderBytes: Int,
            maxConnections: Int,
            idleTimeoutSeconds: Int,
            requestTimeoutSeconds: Int,
            shutdownGraceSeconds: Int,
            maxConnectionsPerAddress: Int? = nil
        ) {
            self.host = host
            self.port = port
            self.threads = threads
            self.maxBodyBytes = maxBodyBytes
            self.maxHeaderBytes = maxHeaderBytes
            self.maxConnections = maxConnections
            self.maxConnectionsPerAddress = maxConnectionsPerAddress
            self.idleTimeoutSeconds = idleTimeoutSeconds
            self.requestTimeoutSeconds = requestTimeoutSeconds
            self.shutdownGraceSeconds = shutdownGraceSeconds
        }

        /// What libmicrohttpd and the deadline table need to work at all,
        /// checked as programmer errors: the ranges a deployment may choose
        /// within are the caller's, validated where they are read.
        func checkPreconditions() {
            precondition(threads >= 1, "threads must be at least 1")
            precondition(maxConnections >= threads && maxConnections <= Int(UInt32.max),
                         "maxConnections must be at least threads, one connection per thread")
            if let maxConnectionsPerAddress {
                precondition(maxConnectionsPerAddress >= 1 && maxConnectionsPerAddress <= Int(UInt32.max),
                             "maxConnectionsPerAddress must be positive")
            }
            precondition(maxBodyBytes >= 0, "maxBodyBytes must not be negative")
            precondition(maxHeaderBytes >= 1, "maxHeaderBytes must be positive")
            precondition(idleTimeoutSeconds >= 1 && idleTimeoutSeconds <= Int(UInt32.max), "idleTimeoutSeconds must be positive")
            precondition(requestTimeoutSeconds >= 1, "requestTimeoutSeconds must be positive")
            precondition(shutdownGraceSeconds >= 0, "shutdownGraceSeconds must not be negative")
        }

        /// libmicrohttpd keeps the request line, headers and write buffer of
        /// a connection in one pool; leave room for headers at our limit so we,
        /// not the library, answer 431. No larger than that: the library
        /// zeroes the whole pool between requests, and at 64 KiB that was
        /// over 5% of the server's CPU per request.
        var connectionMemoryLimitBytes: Int {
            max(2 * maxHeaderBytes + 16 << 10, 32 << 10)
        }
    }

    /// The daemon and the retained context its callbacks receive.
    private struct Running: @unchecked Sendable {
        // Touched only by `shutdown`, which is serialized by `shutdownLock`.
        let daemon: OpaquePointer
        let core: ServerCore
        let context: Unmanaged<ServerCore>
    }

    private enum Lifecycle {
        case created
        case running(Running)
        case stopped
    }

    private let configuration: Configuration
    private let router: Router
    private let logger: Logger
    private let observer: (@Sendable (CompletedRequest) -> Void)?
    private let lifecycle = Locked<Lifecycle>(.created)
    private let shutdownLock = Locked<Void>(())
    private let boundPort = Atomic<UInt16>(0)
    private let refusals: ConnectionRefusals

    /// - Parameter observer: Called on a server thread after each response is
    ///   queued; keep it short (it is meant for metrics).
    public init(
        configuration: Configuration,
        router: Router,
        logger: Logger,
        observer: (@Sendable (CompletedRequest) -> Void)? = nil
    ) {
        configuration.checkPreconditions()
        self.configuration = configuration
        self.router = router
        self.logger = logger
        self.observer = observer
        refusals = ConnectionRefusals(logger: logger)
    }

    deinit {
        shutdown()
    }

    /// The bound port once started (useful with port 0), else 0.
    public var port: UInt16 {
        boundPort.load(ordering: .acquiring)
    }

    /// Connections closed on arrival since start, past the per-address or
    /// the total connection limit.
    public var refusedConnectionCount: Int {
        refusals.count
    }

    /// Binds and starts serving. Freezes the router: routes cannot be added
    /// afterwards.
    public func start() throws {
        let port = try lifecycle.withLock { lifecycle throws(ServerError) -> UInt16 in
            guard case .created = lifecycle else { throw .alreadyStarted }
            let core = ServerCore(
                configuration: configuration, routes: router.freeze(), logger: logger, observer: observer,
                refusals: refusals)
            let running = try Self.startDaemon(core: core, configuration: configuration)
            lifecycle = .running(running)
            return CMicroHTTPD_bound_port(running.daemon)
        }
        boundPort.store(port, ordering: .releasing)
        logger.info(
            "HTTP server started",
            ["http.host": configuration.host, "http.port": String(port), "http.threads": String(configuration.threads)])
    }

    private static func startDaemon(core: ServerCore, configuration: Configuration) throws(ServerError) -> Running {
        guard let address = SocketAddress(host: configuration.host, port: configuration.port) else {
            throw .invalidConfiguration("host \"\(configuration.host)\" is not a numeric IP address")
        }
        let context = Unmanaged.passRetained(core)
        let cls = context.toOpaque()
        core.deadlines.start()
        var flags = MHD_USE_INTERNAL_POLLING_THREAD.rawValue | MHD_USE_EPOLL.rawValue
            | MHD_ALLOW_SUSPEND_RESUME.rawValue | MHD_USE_ITC.rawValue | MHD_USE_ERROR_LOG.rawValue
        if address.isIPv6 { flags |= MHD_USE_IPv6.rawValue }

        let daemon = address.withSockaddr { sockaddr in
            var options: [MHD_OptionItem] = [
                // The logger goes first so that start-up messages reach it.
                CMicroHTTPD_option_logger(libraryLogCallback, cls),
                CMicroHTTPD_option_uri_log(requestLineCallback, cls),
                CMicroHTTPD_option_notify_completed(requestCompletedCallback, cls),
                CMicroHTTPD_option_notify_connection(connectionNotifyCallback, cls),
                CMicroHTTPD_option_uint(.CONNECTION_LIMIT, UInt32(configuration.maxConnections)),
                CMicroHTTPD_option_uint(.CONNECTION_TIMEOUT, UInt32(configuration.idleTimeoutSeconds)),
                CMicroHTTPD_option_size(.CONNECTION_MEMORY_LIMIT, configuration.connectionMemoryLimitBytes),
                CMicroHTTPD_option_sock_addr(sockaddr),
            ]
            if configuration.threads > 1 {
                options.append(CMicroHTTPD_option_uint(.THREAD_POOL_SIZE, UInt32(configuration.threads)))
            }
            // Counted across the thread pool by the library; one past it is
            // accepted and closed at once, so it holds no slot (see
            // `ServerCore.recordLibraryMessage` for how that is reported).
            if let perAddress = configuration.maxConnectionsPerAddress {
                options.append(CMicroHTTPD_option_uint(.PER_IP_CONNECTION_LIMIT, UInt32(perAddress)))
            }
            options.append(CMicroHTTPD_option_end())
            return options.withUnsafeMutableBufferPointer { options in
                CMicroHTTPD_start(flags, configuration.port, accessHandlerCallback, cls, options.baseAddress)
            }
        }
        guard let daemon else {
            core.deadlines.stop()
            context.release()
            let messages = core.recentLibraryMessages()
            throw .startFailed(messages.isEmpty ? "libmicrohttpd returned no daemon" : messages.joined(separator: "; "))
        }
        return Running(daemon: daemon, core: core, context: context)
    }

    /// Stops gracefully: new connections are refused at once, requests in
    /// flight (including deferred ones) get up to `shutdownGraceSeconds` to
    /// finish, and responses sent meanwhile carry `Connection: close`. Deferred
    /// requests still unanswered at the deadline get 503 `shutting_down`.
    /// Then the daemon stops. Idempotent; a concurrent call waits for the
    /// first. A handler still running synchronously delays the stop until it
    /// returns, so never call this from a handler: the stop would wait for
    /// the very thread it runs on.
    public func shutdown() {
        shutdownLock.withLock { _ in
            let running = lifecycle.withLock { lifecycle -> Running? in
                defer { lifecycle = .stopped }
                guard case .running(let running) = lifecycle else { return nil }
                return running
            }
            guard let running else { return }
            stop(running)
        }
    }

    private func stop(_ running: Running) {
        let core = running.core
        let started = ContinuousClock.now
        let deadline = started + .seconds(configuration.shutdownGraceSeconds)

        core.beginDraining()
        // Quiescing removes the listening socket from the event loops but
        // leaves it open, so the kernel would still complete handshakes into a
        // backlog nobody accepts. Shutting it down makes connects fail now.
        let listenSocket = MHD_quiesce_daemon(running.daemon)
        if listenSocket >= 0 {
            _ = Glibc.shutdown(listenSocket, Int32(SHUT_RDWR))
        }
        logger.info("HTTP server draining", ["http.in_flight": String(core.inFlightCount)])

        _ = core.waitUntilNoneInFlight(until: deadline)

        // From here no request may suspend: the daemon must not stop with a
        // suspended connection. Deferred requests still waiting get a 503.
        let abandoned = core.abandonDeferred()
        if abandoned > 0 {
            logger.warning("shutdown grace ended with deferred requests unanswered", ["http.abandoned": String(abandoned)])
            _ = core.waitUntilNoneInFlight(until: .now + .milliseconds(500))
        }

        MHD_stop_daemon(running.daemon)
        core.deadlines.stop()
        if listenSocket >= 0 {
            close(listenSocket)
        }
        // Every connection is closed now, so no callback can use the context.
        running.context.release()
        let elapsed = started.duration(to: .now) / .seconds(1)
        logger.info("HTTP server stopped", ["http.shutdown_seconds": String(format3(elapsed))])
    }
}

private func format3(_ value: Double) -> String {
    String(Double(Int((value * 1000).rounded())) / 1000)
}

/// A numeric socket address for MHD_OPTION_SOCK_ADDR.
struct SocketAddress {
    private enum Storage {
        case v4(sockaddr_in)
        case v6(sockaddr_in6)
    }

    private let storage: Storage

    init?(host: String, port: UInt16) {
        var v4 = sockaddr_in()
        if inet_pton(AF_INET, host, &v4.sin_addr) == 1 {
            v4.sin_family = sa_family_t(AF_INET)
            v4.sin_port = port.bigEndian
            storage = .v4(v4)
            return
        }
        var v6 = sockaddr_in6()
        if inet_pton(AF_INET6, host, &v6.sin6_addr) == 1 {
            v6.sin6_family = sa_family_t(AF_INET6)
            v6.sin6_port = port.bigEndian
            storage = .v6(v6)
            return
        }
        return nil
    }

    var isIPv6: Bool {
        if case .v6 = storage { true } else { false }
    }

    func withSockaddr<T>(_ body: (UnsafePointer<sockaddr>) -> T) -> T {
        switch storage {
        case .v4(var address):
            withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1, body) }
        case .v6(var address):
            withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1, body) }
        }
    }

    /// The numeric host of a peer address, without port.
    static func describe(_ address: UnsafePointer<sockaddr>) -> String? {
        var buffer = [CChar](repeating: 0, count: Int(INET6_ADDRSTRLEN))
        let written: UnsafePointer<CChar>?
        switch Int32(address.pointee.sa_family) {
        case AF_INET:
            written = address.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { v4 in
                var raw = v4.pointee.sin_addr
                return inet_ntop(AF_INET, &raw, &buffer, socklen_t(buffer.count))
            }
        case AF_INET6:
            written = address.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { v6 in
                var raw = v6.pointee.sin6_addr
                return inet_ntop(AF_INET6, &raw, &buffer, socklen_t(buffer.count))
            }
        default:
            return nil
        }
        guard written != nil else { return nil }
        return buffer.withUnsafeBufferPointer { String(cString: $0.baseAddress!) }
    }
}
