import CMicroHTTPD
import Locking
import Logging

/// Completes one request. Call `send` or `fail` exactly once, from any thread.
///
/// Answering before the handler returns queues the response at once. Answering
/// later is fine: the connection is suspended meanwhile, so a waiting request
/// holds no server thread, and it resumes when the answer arrives. A second
/// answer is ignored (and logged at debug). Releasing every copy of a
/// responder without answering is a programming error: the client gets a
/// bare 500 and the log says so.
public struct Responder: Sendable {
    private let token: ResponderToken

    init(exchange: Exchange) {
        token = ResponderToken(sink: exchange)
    }

    public func send(_ response: Response) {
        token.sink.deliver(response)
    }

    /// Answers with the problem for `error`; see ``ProblemConvertible``.
    public func fail(_ error: any Error) {
        token.sink.deliver(error: error)
    }
}

/// Where a responder's answer goes.
protocol ResponseSink: AnyObject, Sendable {
    func deliver(_ response: Response)
    func deliver(error: any Error)
    /// Every copy of the responder is gone.
    func responderReleased()
}

/// Shared by all copies of one `Responder`; its release tells the sink that
/// no answer can come any more.
private final class ResponderToken: Sendable {
    let sink: any ResponseSink

    init(sink: any ResponseSink) {
        self.sink = sink
    }

    deinit {
        sink.responderReleased()
    }
}

/// A libmicrohttpd connection handle that may cross threads.
///
/// Only `MHD_resume_connection`, which libmicrohttpd allows from any thread,
/// is called away from the connection's own thread, and only while the
/// connection is suspended (so it cannot be closed under us).
struct ConnectionHandle: @unchecked Sendable {
    let raw: OpaquePointer
}

/// The answer side of one dispatched request: a small state machine that
/// settles the race between a handler returning and its answer arriving on
/// another thread.
///
///     handling ──send──▶ answered ──handler returns──▶ delivered
///        │
///        └─handler returns──▶ suspended ──send──▶ resumed ──connection thread──▶ delivered
///                                 └──────shutdown──▶ resumed(nil) ─▶ 503
///
/// Suspension happens under the lock and resumption too, so a resume can
/// never precede its suspend (libmicrohttpd would then skip the suspend and
/// spin on the request).
final class Exchange: ResponseSink {
    private enum Phase: Sendable {
        /// The handler is running on the connection's thread.
        case handling(ConnectionHandle)
        /// An answer arrived while the handler was still running.
        case answered(Response)
        /// The handler returned without an answer; the connection is suspended.
        case suspended(ConnectionHandle)
        /// Resumed; the connection's thread will queue this (nil: abandoned at shutdown).
        case resumed(Response?)
        /// Queued, or the request is over; later answers are ignored.
        case delivered
    }

    enum AfterHandler {
        case respond(Response)
        case deferred
    }

    let requestID: String
    private let logger: Logger
    private let phase: Locked<Phase>

    init(connection: ConnectionHandle, requestID: String, logger: Logger) {
        self.requestID = requestID
        self.logger = logger
        self.phase = Locked(.handling(connection))
    }

    func deliver(_ response: Response) {
        let accepted = phase.withLock { phase in
            switch phase {
            case .handling:
                phase = .answered(response)
                return true
            case .suspended(let connection):
                phase = .resumed(response)
                MHD_resume_connection(connection.raw)
                return true
            case .answered, .resumed, .delivered:
                return false
            }
        }
        if !accepted {
            logger.debug("second answer to a request ignored", ["request.id": requestID])
        }
    }

    func deliver(error: any Error) {
        deliver(Self.response(for: error, requestID: requestID, logger: logger))
    }

    func responderReleased() {
        let unanswered = phase.withLock { phase in
            switch phase {
            case .handling, .suspended: true
            case .answered, .resumed, .delivered: false
            }
        }
        guard unanswered else { return }
        logger.error("handler released its responder without answering", ["request.id": requestID])
        deliver(.problem(.internalError()))
    }

    /// Called on the connection's thread when the handler returns. Without an
    /// answer yet, the connection is suspended unless `mayDefer` is false
    /// (the server is stopping), in which case the client gets a 503 now.
    func handlerReturned(mayDefer: Bool) -> AfterHandler {
        phase.withLock { phase in
            switch phase {
            case .answered(let response):
                phase = .delivered
                return .respond(response)
            case .handling(let connection):
                guard mayDefer else {
                    phase = .delivered
                    return .respond(.problem(.shuttingDown()))
                }
                MHD_suspend_connection(connection.raw)
                phase = .suspended(connection)
                return .deferred
            case .suspended, .resumed, .delivered:
                preconditionFailure("handler returned twice for one request")
            }
        }
    }

    /// Called on the connection's thread after a resume: the response to
    /// queue, or nil if the exchange was not resumed.
    func takeResumedResponse() -> Response? {
        phase.withLock { phase in
            guard case .resumed(let response) = phase else { return nil }
            phase = .delivered
            return response ?? .problem(.shuttingDown())
        }
    }

    /// Resumes a suspended exchange without an answer, so the daemon can stop.
    /// Returns whether it was suspended.
    func abandon() -> Bool {
        phase.withLock { phase in
            guard case .suspended(let connection) = phase else { return false }
            phase = .resumed(nil)
            MHD_resume_connection(connection.raw)
            return true
        }
    }

    /// The request is over (completed or its connection closed).
    func finish() {
        phase.withLock { $0 = .delivered }
    }

    /// The response for a handler's error; an unexpected error is logged here
    /// and becomes a bare 500.
    static func response(for error: any Error, requestID: String, logger: Logger) -> Response {
        let (problem, isUnexpected) = Problem.from(error)
        if isUnexpected {
            logger.error(
                "handler failed with an unexpected error",
                ["request.id": requestID, "error.type": String(reflecting: type(of: error)), "error.description": String(reflecting: error)])
        }
        return .problem(problem)
    }
}
