import CMicroHTTPD
import Dispatch
import Locking
import Logging
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// Everything the libmicrohttpd callbacks share. It reaches them as the
/// retained `cls` pointer and is immutable apart from its locked and atomic
/// members.
final class ServerCore: Sendable {
    let configuration: Server.Configuration
    let routes: RouteTable
    let logger: Logger
    let observer: (@Sendable (CompletedRequest) -> Void)?
    /// Bounds each request's arrival, headers included.
    let deadlines: RequestDeadlines
    /// Counts and reports connections the library closed on arrival.
    let refusals: ConnectionRefusals

    /// Requests handed to a handler and not yet completed, keyed by identity.
    /// At most one per connection, so bounded by `maxConnections`. Shutdown
    /// waits on it to empty.
    private let inFlight = Monitor<[ObjectIdentifier: Exchange]>([:])
    /// Set when shutdown begins: responses ask clients to close.
    private let draining = Atomic<Bool>(false)
    /// Set when the grace ends: handlers may no longer defer.
    private let stopping = Atomic<Bool>(false)
    /// The last few library messages, to explain a failed start.
    private let libraryMessages = Locked<[String]>([])
    private static let libraryMessagesMax = 8

    init(
        configuration: Server.Configuration,
        routes: RouteTable,
        logger: Logger,
        observer: (@Sendable (CompletedRequest) -> Void)?,
        refusals: ConnectionRefusals
    ) {
        self.configuration = configuration
        self.routes = routes
        self.logger = logger
        self.observer = observer
        self.refusals = refusals
        self.deadlines = RequestDeadlines(
            requestTimeoutSeconds: configuration.requestTimeoutSeconds,
            idleTimeoutSeconds: configuration.idleTimeoutSeconds, maxConnections: configuration.maxConnections)
    }

    // MARK: Lifecycle support

    var inFlightCount: Int {
        inFlight.withLock { $0.count }
    }

    /// Waits until no request is in flight, at most until `deadline`; false
    /// if some still are.
    func waitUntilNoneInFlight(until deadline: ContinuousClock.Instant) -> Bool {
        inFlight.wait(until: deadline) { $0.isEmpty }
    }

    func beginDraining() {
        draining.store(true, ordering: .releasing)
    }

    /// Forbids deferring from now on and resumes every deferred request so it
    /// is answered 503. Returns how many were waiting.
    ///
    /// The flag is set before the scan, and `Exchange.handlerReturned` reads
    /// it under the exchange's lock: an exchange suspends either before the
    /// scan reaches it (and is resumed by it) or not at all.
    func abandonDeferred() -> Int {
        stopping.store(true, ordering: .sequentiallyConsistent)
        let exchanges = inFlight.withLock { Array($0.values) }
        return exchanges.reduce(0) { count, exchange in count + (exchange.abandon() ? 1 : 0) }
    }

    /// How libmicrohttpd 0.9.x begins the message it logs for each
    /// connection it closes on arrival, past the per-address or the total
    /// limit; it tells us of those in no other way.
    static let connectionLimitMessagePrefix = "Server reached connection limit"

    func recordLibraryMessage(_ message: String) {
        if message.hasPrefix(Self.connectionLimitMessagePrefix) {
            // One a connection: a client that keeps reconnecting would
            // flood the log, so these are counted and summed up instead.
            refusals.record()
            return
        }
        libraryMessages.withLock { messages in
            if messages.count == Self.libraryMessagesMax { messages.removeFirst() }
            messages.append(message)
        }
        // The library says this whenever the handler returns MHD_NO, which
        // this server does only on purpose (see `rejectMidBody`) and logs itself.
        let isEcho = message.hasPrefix("Application reported internal error")
        logger.log(isEcho ? .debug : .info, "libmicrohttpd message", ["http.library_message": message])
    }

    func recentLibraryMessages() -> [String] {
        libraryMessages.withLock { $0 }
    }

    // MARK: Connections

    func connectionStarted(_ connection: OpaquePointer) {
        let socket = CMicroHTTPD_connection_fd(connection)
        guard socket >= 0 else { return }
        if !deadlines.connectionStarted(Int(bitPattern: connection), socket: socket) {
            logger.warning("connection refused: too many connections tracked", [:])
            _ = Glibc.shutdown(socket, Int32(SHUT_RDWR))
        }
    }

    func connectionClosed(_ connection: OpaquePointer) {
        deadlines.connectionClosed(Int(bitPattern: connection))
    }

    // MARK: Request phases

    /// The request line has arrived. The request as a whole must arrive within
    /// the request timeout, so the connection's inactivity timeout is
    /// shortened to it until the request is dispatched.
    func requestLineReceived(_ context: RequestContext, connection: OpaquePointer) {
        deadlines.requestLineArrived(Int(bitPattern: connection))
        setTimeout(context, connection, seconds: min(configuration.idleTimeoutSeconds, configuration.requestTimeoutSeconds))
    }

    /// Called for every access-handler invocation of one request.
    func handle(
        _ context: RequestContext,
        connection: OpaquePointer,
        method: UnsafePointer<CChar>?,
        uploadData: UnsafePointer<CChar>?,
        uploadDataSize: UnsafeMutablePointer<Int>
    ) -> MHD_Result {
        switch context.phase {
        case .headers:
            // First call: the headers are complete, no body has been read.
            return begin(context, connection: connection, method: method.map { String(cString: $0) } ?? "")
        case .body:
            if uploadDataSize.pointee > 0, let uploadData {
                let received = UnsafeRawBufferPointer(start: uploadData, count: uploadDataSize.pointee)
                uploadDataSize.pointee = 0
                return receive(context, connection: connection, bytes: received)
            }
            return dispatch(context, connection: connection)
        case .rejected(let response):
            // A request without a body is answered on the final call, which
            // keeps the connection alive.
            uploadDataSize.pointee = 0
            return queue(response, context, connection)
        case .dispatched(let exchange):
            // Called again after a resume.
            guard let response = exchange.takeResumedResponse() else {
                logger.error("request resumed without an answer", ["request.id": context.requestID])
                return queue(.problem(.internalError()), context, connection)
            }
            return queue(response, context, connection)
        case .answered:
            uploadDataSize.pointee = 0
            return .YES
        }
    }

    private func begin(_ context: RequestContext, connection: OpaquePointer, method: String) -> MHD_Result {
        context.method = method
        context.requestID = RequestID.accepting(lookupHeader(connection, "X-Request-Id")) ?? RequestID.generate()

        var collector = HeaderCollector(limitBytes: configuration.maxHeaderBytes)
        withUnsafeMutablePointer(to: &collector) { collector in
            _ = MHD_get_connection_values_n(connection, .HEADER_KIND, collectHeaderCallback, collector)
        }
        let headers = Headers(collector.fields)
        let framing = BodyFraming(headers)

        if let rejection = screen(context, headers: headers, headersExceeded: collector.exceeded, framing: framing) {
            let response = Response.problem(rejection)
            if framing.hasBody {
                // Answering before the body is read makes libmicrohttpd skip
                // the body and close the connection after the response.
                return queue(response, context, connection)
            }
            context.phase = .rejected(response)
            return .YES
        }
        context.headers = headers
        context.body.reserveCapacity(Int(min(framing.contentLength, UInt64(configuration.maxBodyBytes))))
        context.phase = .body
        return .YES
    }

    /// The problem that refuses the request before its body, if any. Matches
    /// the route and runs its gate as side effects. The order: the route (an
    /// unknown path is 404 whatever the body), then the gate (a caller
    /// without the right gets 401/403 whatever the body), then the size.
    private func screen(_ context: RequestContext, headers: Headers, headersExceeded: Bool,
                        framing: BodyFraming) -> Problem? {
        if headersExceeded {
            return .headersTooLarge(limitBytes: configuration.maxHeaderBytes)
        }
        if let problem = framing.problem {
            return problem
        }
        guard let target = RequestTarget(raw: context.rawTarget) else {
            return .badRequest("The request target is not a valid path.")
        }
        context.target = target
        switch routes.match(method: context.method, path: target.segments) {
        case .notFound:
            return .notFound()
        case .methodNotAllowed(let allowed):
            return .methodNotAllowed(allowed: allowed)
        case .found(let route, let parameters):
            context.route = route
            context.pathParameters = parameters
        }
        if let gate = context.route?.gate {
            do {
                context.admission = try gate(RequestHead(method: context.method, path: target.path, headers: headers,
                                                         requestID: context.requestID))
            } catch {
                let (problem, isUnexpected) = Problem.from(error)
                if isUnexpected {
                    logger.error("gate failed", ["request.id": context.requestID, "error": String(reflecting: error)])
                }
                return problem
            }
        }
        if framing.contentLength > UInt64(configuration.maxBodyBytes) {
            return .payloadTooLarge(limitBytes: configuration.maxBodyBytes)
        }
        return nil
    }

    private func receive(_ context: RequestContext, connection: OpaquePointer, bytes: UnsafeRawBufferPointer) -> MHD_Result {
        let elapsedNanoseconds = DispatchTime.now().uptimeNanoseconds - context.startedNanoseconds
        let timeoutNanoseconds = UInt64(configuration.requestTimeoutSeconds) * 1_000_000_000
        if elapsedNanoseconds >= timeoutNanoseconds {
            return rejectMidBody(.requestTimeout(seconds: configuration.requestTimeoutSeconds), context, connection)
        }
        if context.body.count + bytes.count > configuration.maxBodyBytes {
            // Only a chunked body can get here: a declared length was checked up front.
            return rejectMidBody(.payloadTooLarge(limitBytes: configuration.maxBodyBytes), context, connection)
        }
        context.body.append(contentsOf: bytes)
        // The inactivity timeout now stands for what is left of the request
        // timeout, so a client that stalls is cut off at the deadline.
        let remainingSeconds = Int((timeoutNanoseconds - elapsedNanoseconds + 999_999_999) / 1_000_000_000)
        setTimeout(context, connection, seconds: min(configuration.idleTimeoutSeconds, remainingSeconds))
        return .YES
    }

    /// libmicrohttpd 0.9.75 refuses to queue a response while a body is being
    /// read, so the response is written to the socket directly and the
    /// connection is closed (by returning MHD_NO). Nothing else writes to the
    /// socket in this phase.
    private func rejectMidBody(_ problem: Problem, _ context: RequestContext, _ connection: OpaquePointer) -> MHD_Result {
        writeDirectly(.problem(problem), context, connection)
        return .NO
    }

    private func dispatch(_ context: RequestContext, connection: OpaquePointer) -> MHD_Result {
        guard let route = context.route, let target = context.target else {
            preconditionFailure("dispatch without a matched route")
        }
        deadlines.requestArrived(Int(bitPattern: connection))
        setTimeout(context, connection, seconds: configuration.idleTimeoutSeconds)
        let request = Request(
            method: context.method,
            path: target.path,
            query: target.query,
            headers: context.headers,
            body: context.takeBody(),
            requestID: context.requestID,
            pathParameters: context.pathParameters,
            remoteAddress: CMicroHTTPD_client_address(connection).flatMap(SocketAddress.describe),
            admission: context.admission)
        let exchange = Exchange(connection: ConnectionHandle(raw: connection), requestID: context.requestID, logger: logger)
        context.phase = .dispatched(exchange)
        context.exchange = exchange
        inFlight.withLock { $0[ObjectIdentifier(exchange)] = exchange }

        route.handler(request, Responder(exchange: exchange))

        switch exchange.handlerReturned(mayDefer: !stopping.load(ordering: .sequentiallyConsistent)) {
        case .respond(let response):
            return queue(response, context, connection)
        case .deferred:
            return .YES
        }
    }

    // MARK: Completion

    func completed(_ context: RequestContext, connection: OpaquePointer?, reason: MHD_RequestTerminationCode) {
        if let connection {
            deadlines.requestEnded(Int(bitPattern: connection))
        }
        if reason == .REQUEST_TERMINATED_TIMEOUT_REACHED, let connection {
            switch context.phase {
            case .headers, .body:
                // The client stalled mid-request; say why before the library closes.
                if context.requestID.isEmpty { context.requestID = RequestID.generate() }
                writeDirectly(.problem(.requestTimeout(seconds: configuration.requestTimeoutSeconds)), context, connection)
            case .rejected, .dispatched, .answered:
                break
            }
        }
        if let exchange = context.exchange {
            exchange.finish()
            let noneLeft = inFlight.withLock { inFlight in
                inFlight.removeValue(forKey: ObjectIdentifier(exchange))
                return inFlight.isEmpty
            }
            // Only shutdown waits, and only for none in flight.
            if noneLeft { inFlight.broadcast() }
        }
    }

    // MARK: Responses

    /// Queues `response` with libmicrohttpd. Framing headers are the
    /// library's; `X-Request-Id` is ours.
    private func queue(_ response: Response, _ context: RequestContext, _ connection: OpaquePointer) -> MHD_Result {
        var response = checked(response.finalized(requestID: context.requestID), context)
        var mhdResponse = makeLibraryResponse(response, context)
        if mhdResponse == nil {
            logger.error("response headers refused by libmicrohttpd", ["request.id": context.requestID])
            response = Response.problem(.internalError()).finalized(requestID: context.requestID)
            mhdResponse = makeLibraryResponse(response, context)
        }
        guard let mhdResponse else { return .NO }
        deadlines.requestArrived(Int(bitPattern: connection))
        setTimeout(context, connection, seconds: configuration.idleTimeoutSeconds)
        let result = MHD_queue_response(connection, UInt32(response.status), mhdResponse)
        MHD_destroy_response(mhdResponse)
        context.phase = .answered
        if result == .NO {
            logger.error("libmicrohttpd refused to queue a response", ["request.id": context.requestID])
            return .NO
        }
        observe(context, status: response.status)
        return .YES
    }

    private func makeLibraryResponse(_ response: Response, _ context: RequestContext) -> OpaquePointer? {
        let mhdResponse = response.body.withUnsafeBytes { body in
            MHD_create_response_from_buffer(
                body.count, UnsafeMutableRawPointer(mutating: body.baseAddress), .RESPMEM_MUST_COPY)
        }
        guard let mhdResponse else { return nil }
        for (name, value) in sendableHeaders(response, context) {
            guard MHD_add_response_header(mhdResponse, name, value) == .YES else {
                MHD_destroy_response(mhdResponse)
                return nil
            }
        }
        return mhdResponse
    }

    /// The handler's headers without framing ones, plus ours.
    private func sendableHeaders(_ response: Response, _ context: RequestContext) -> [(name: String, value: String)] {
        var headers = response.headers.filter { header in
            let name = header.name.lowercased()
            return name != "content-length" && name != "transfer-encoding" && name != "x-request-id"
        }
        headers.append(("X-Request-Id", context.requestID))
        if draining.load(ordering: .relaxed) {
            headers.append(("Connection", "close"))
        }
        return headers
    }

    /// A status outside 200...599 is a handler bug; the client gets a 500.
    private func checked(_ response: Response, _ context: RequestContext) -> Response {
        guard (200...599).contains(response.status) else {
            logger.error(
                "handler answered with an invalid status",
                ["request.id": context.requestID, "http.status": String(response.status)])
            return Response.problem(.internalError()).finalized(requestID: context.requestID)
        }
        return response
    }

    /// Writes a complete `Connection: close` response on the socket, for the
    /// cases libmicrohttpd cannot answer (see `rejectMidBody`). A partial
    /// write is abandoned; the connection is closing either way.
    private func writeDirectly(_ response: Response, _ context: RequestContext, _ connection: OpaquePointer) {
        let response = response.finalized(requestID: context.requestID)
        context.phase = .answered
        let socket = CMicroHTTPD_connection_fd(connection)
        guard socket >= 0 else { return }
        var text = "HTTP/1.1 \(response.status) \(HTTPStatus.reasonPhrase(response.status))\r\n"
        text += "Date: \(HTTPDate.now())\r\n"
        for (name, value) in sendableHeaders(response, context) where !RawHeader.isUnsafe(name, value) {
            text += "\(name): \(value)\r\n"
        }
        text += "Content-Length: \(response.body.count)\r\nConnection: close\r\n\r\n"
        let bytes = Array(text.utf8) + response.body
        let sent = bytes.withUnsafeBytes { send(socket, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL | MSG_DONTWAIT)) }
        if sent != bytes.count {
            logger.debug("direct response not fully written", ["request.id": context.requestID])
        }
        observe(context, status: response.status)
    }

    private func observe(_ context: RequestContext, status: Int) {
        let seconds = Double(DispatchTime.now().uptimeNanoseconds - context.startedNanoseconds) / 1e9
        logger.debug(
            "request answered",
            [
                "request.id": context.requestID, "http.method": context.method,
                "http.route": context.route?.pattern ?? "-", "http.status": String(status),
            ])
        observer?(CompletedRequest(
            method: context.method, routePattern: context.route?.pattern, status: status, durationSeconds: seconds))
    }

    private func setTimeout(_ context: RequestContext, _ connection: OpaquePointer, seconds: Int) {
        let seconds = UInt32(max(1, seconds))
        guard context.timeoutSeconds != seconds else { return }
        _ = CMicroHTTPD_set_connection_timeout(connection, seconds)
        context.timeoutSeconds = seconds
    }

    private func lookupHeader(_ connection: OpaquePointer, _ name: String) -> String? {
        MHD_lookup_connection_value(connection, .HEADER_KIND, name).map { String(cString: $0) }
    }
}

/// Per-request state, kept in libmicrohttpd's request pointer. Touched only
/// on the connection's thread.
final class RequestContext {
    enum Phase {
        /// Request line received; headers not yet seen by us.
        case headers
        /// Accepted; the body (if any) is arriving.
        case body
        /// Refused before any body; answered on the final call.
        case rejected(Response)
        /// In the handler's hands.
        case dispatched(Exchange)
        /// A response has been queued or written.
        case answered
    }

    let rawTarget: [UInt8]
    let startedNanoseconds: UInt64
    var phase = Phase.headers
    var method = ""
    var requestID = ""
    var headers = Headers([])
    var target: RequestTarget?
    var route: Route?
    var pathParameters: [String: String] = [:]
    var admission: (any Sendable)?
    var body: [UInt8] = []
    var exchange: Exchange?
    /// The inactivity timeout last set on the connection, 0 for the daemon's.
    var timeoutSeconds: UInt32 = 0

    init(rawTarget: [UInt8], startedNanoseconds: UInt64) {
        self.rawTarget = rawTarget
        self.startedNanoseconds = startedNanoseconds
    }

    func takeBody() -> [UInt8] {
        defer { body = [] }
        return body
    }
}

/// How the request says its body is framed.
struct BodyFraming {
    /// The declared length; 0 when absent (libmicrohttpd has already refused
    /// a Content-Length that is not a number).
    let contentLength: UInt64
    let hasBody: Bool
    /// Framing this server refuses to read.
    let problem: Problem?

    init(_ headers: Headers) {
        let transferEncoding = headers["transfer-encoding"]
        let contentLengths = headers.values(for: "content-length")
        contentLength = contentLengths.first.flatMap { UInt64($0[...].trimmingOptionalWhitespace) } ?? 0
        hasBody = transferEncoding != nil || contentLength > 0
        if let transferEncoding, transferEncoding[...].trimmingOptionalWhitespace.lowercased() != "chunked" {
            // libmicrohttpd 0.9.75 would read any other coding as an endless body.
            problem = Problem(
                status: 501, code: "unsupported_transfer_encoding",
                detail: "Only the chunked transfer coding is supported.")
        } else if transferEncoding != nil && !contentLengths.isEmpty {
            // Two framings disagreeing is how requests get smuggled past proxies.
            problem = .badRequest("Content-Length and Transfer-Encoding must not both be present.")
        } else if Set(contentLengths).count > 1 {
            problem = .badRequest("Conflicting Content-Length values.")
        } else {
            problem = nil
        }
    }
}

/// Gathers header fields and stops once their size passes the limit.
struct HeaderCollector {
    let limitBytes: Int
    var totalBytes = 0
    var exceeded = false
    var fields: [(name: String, value: String)] = []

    init(limitBytes: Int) {
        self.limitBytes = limitBytes
    }
}

private enum RawHeader {
    /// A header that would break the framing of a hand-written response.
    static func isUnsafe(_ name: String, _ value: String) -> Bool {
        (name + value).utf8.contains { $0 == UInt8(ascii: "\r") || $0 == UInt8(ascii: "\n") }
    }
}

extension Substring {
    /// Without the spaces and tabs around it (HTTP's optional whitespace).
    /// Foundation's `trimmingCharacters` would bridge through `NSString`,
    /// which on a request path costs a few percent of the CPU.
    public var trimmingOptionalWhitespace: Substring {
        var view = self
        while let first = view.first, first == " " || first == "\t" { view = view.dropFirst() }
        while let last = view.last, last == " " || last == "\t" { view = view.dropLast() }
        return view
    }
}
