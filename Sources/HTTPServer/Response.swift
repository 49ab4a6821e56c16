import Foundation
public import JSON

/// An HTTP response. The server adds `Content-Length`, `Date` and
/// `X-Request-Id`; a `Content-Length` or `Transfer-Encoding` set here is
/// ignored, because the server alone frames the body.
public struct Response: Sendable {
    public var status: Int
    public var headers: [(name: String, value: String)]
    public var body: [UInt8] {
        // The body no longer matches the problem it was rendered from.
        didSet { problem = nil }
    }

    /// Set by `problem(_:)`, so the server can fill in `instance` with the
    /// request id before sending.
    private(set) var problem: Problem?

    public init(status: Int, headers: [(name: String, value: String)] = [], body: [UInt8] = []) {
        self.status = status
        self.headers = headers
        self.body = body
        self.problem = nil
    }

    /// `application/json`, written by `JSONValue`'s serializer: the one JSON
    /// writer for every answer, problems included.
    public static func json(
        _ value: JSONValue, status: Int = 200, headers: [(name: String, value: String)] = []
    ) -> Response {
        Response(status: status, headers: [("Content-Type", "application/json")] + headers, body: value.serialized())
    }

    /// `application/problem+json`, with the problem's headers.
    public static func problem(_ problem: Problem) -> Response {
        var response = Response(
            status: problem.status,
            headers: [("Content-Type", "application/problem+json")] + problem.headers,
            body: problem.json.serialized())
        response.problem = problem
        return response
    }

    public static func text(
        _ s: String, status: Int = 200, contentType: String = "text/plain; charset=utf-8"
    ) -> Response {
        Response(status: status, headers: [("Content-Type", contentType)], body: Array(s.utf8))
    }

    /// The response as sent for a request: a problem without `instance`
    /// gets the request id.
    func finalized(requestID: String) -> Response {
        guard var problem, problem.instance == nil else { return self }
        problem.instance = requestID
        var response = self
        response.body = problem.json.serialized()
        response.problem = problem
        return response
    }
}
