public import JSON

/// RFC 9457 problem details, sent as `application/problem+json`.
///
/// `code` is the stable, machine-readable name clients branch on; `type` is
/// built from it (`<typeBase><code>`) unless given. Extra members (for example
/// `"balance": 6`, `"reason": "revoked"`, `"errors": [...]`) go in `extra`;
/// they cannot replace the standard members. `headers` travel with the
/// response (`Allow`, `Retry-After`, `WWW-Authenticate`).
public struct Problem: Error, Sendable {
    /// The default prefix of `type`: a problem's URI is this plus its code.
    /// A URN, so the type names the problem without promising a page to
    /// fetch; the service's documentation lists every code.
    public static let defaultTypeBase = "urn:problem:"

    public var type: String
    public var title: String
    public var status: Int
    public var detail: String
    public var code: String
    /// Identifies this occurrence. The server fills in the request id when nil.
    public var instance: String?
    public var extra: [String: JSONValue]
    public var headers: [(name: String, value: String)]

    /// - Parameters:
    ///   - title: A short summary of the problem type; defaults to the HTTP reason phrase.
    ///   - typeBase: Prefix for `type`, which becomes `typeBase + code`.
    public init(
        status: Int,
        code: String,
        title: String? = nil,
        detail: String,
        instance: String? = nil,
        extra: [String: JSONValue] = [:],
        headers: [(name: String, value: String)] = [],
        typeBase: String = Problem.defaultTypeBase
    ) {
        self.type = typeBase + code
        self.title = title ?? HTTPStatus.reasonPhrase(status)
        self.status = status
        self.detail = detail
        self.code = code
        self.instance = instance
        self.extra = extra
        self.headers = headers
    }

    /// The problem document: standard members first, then extras by key.
    public var json: JSONValue {
        var members: [(key: String, value: JSONValue)] = [
            ("type", .string(type)),
            ("title", .string(title)),
            ("status", JSONValue(status)),
            ("detail", .string(detail)),
            ("code", .string(code)),
        ]
        if let instance { members.append(("instance", .string(instance))) }
        let standard: Set<String> = ["type", "title", "status", "detail", "code", "instance"]
        for key in extra.keys.sorted() where !standard.contains(key) {
            members.append((key, extra[key]!))
        }
        return .object(members)
    }
}

/// An error that knows its HTTP problem. A service makes its error type
/// conform once, and every handler's thrown error maps through it.
public protocol ProblemConvertible: Error {
    var problem: Problem { get }
}

// MARK: - Problems the server itself produces

extension Problem {
    static func badRequest(_ detail: String) -> Problem {
        Problem(status: 400, code: "bad_request", detail: detail)
    }

    static func notFound() -> Problem {
        Problem(status: 404, code: "not_found", detail: "No resource exists at this path.")
    }

    static func methodNotAllowed(allowed: [String]) -> Problem {
        let list = allowed.joined(separator: ", ")
        return Problem(
            status: 405, code: "method_not_allowed",
            detail: "This resource supports only: \(list).",
            headers: [("Allow", list)])
    }

    static func requestTimeout(seconds: Int) -> Problem {
        Problem(
            status: 408, code: "request_timeout",
            detail: "The request was not received within \(seconds) seconds.")
    }

    static func payloadTooLarge(limitBytes: Int) -> Problem {
        Problem(
            status: 413, code: "payload_too_large",
            detail: "The request body exceeds the limit of \(limitBytes) bytes.",
            extra: ["limit_bytes": JSONValue(limitBytes)])
    }

    static func headersTooLarge(limitBytes: Int) -> Problem {
        Problem(
            status: 431, code: "headers_too_large",
            detail: "The request header fields exceed the limit of \(limitBytes) bytes.",
            extra: ["limit_bytes": JSONValue(limitBytes)])
    }

    static func shuttingDown() -> Problem {
        Problem(
            status: 503, code: "shutting_down",
            detail: "The server is shutting down; retry the request.",
            headers: [("Retry-After", "1")])
    }

    static func internalError() -> Problem {
        Problem(status: 500, code: "internal", detail: "An unexpected error occurred.")
    }

    /// Maps any error a handler throws or fails with to its problem, in one
    /// place. `isUnexpected` marks the bare 500 whose cause only the log may see.
    public static func from(_ error: any Error) -> (problem: Problem, isUnexpected: Bool) {
        switch error {
        case let problem as Problem:
            return (problem, false)
        case let convertible as any ProblemConvertible:
            return (convertible.problem, false)
        default:
            return (internalError(), true)
        }
    }
}

enum HTTPStatus {
    static func reasonPhrase(_ status: Int) -> String {
        switch status {
        case 200: "OK"
        case 201: "Created"
        case 202: "Accepted"
        case 204: "No Content"
        case 301: "Moved Permanently"
        case 302: "Found"
        case 304: "Not Modified"
        case 400: "Bad Request"
        case 401: "Unauthorized"
        case 402: "Payment Required"
        case 403: "Forbidden"
        case 404: "Not Found"
        case 405: "Method Not Allowed"
        case 406: "Not Acceptable"
        case 408: "Request Timeout"
        case 409: "Conflict"
        case 410: "Gone"
        case 411: "Length Required"
        case 412: "Precondition Failed"
        case 413: "Content Too Large"
        case 415: "Unsupported Media Type"
        case 422: "Unprocessable Content"
        case 425: "Too Early"
        case 428: "Precondition Required"
        case 429: "Too Many Requests"
        case 431: "Request Header Fields Too Large"
        case 500: "Internal Server Error"
        case 501: "Not Implemented"
        case 502: "Bad Gateway"
        case 503: "Service Unavailable"
        case 504: "Gateway Timeout"
        default: "Status \(status)"
        }
    }
}
