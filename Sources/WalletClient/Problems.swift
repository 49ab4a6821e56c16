public import Foundation

/// An RFC 9457 problem document as the service answered it: the members
/// every problem has, the whole body, and what the answer's headers said.
public struct ProblemDetails: Sendable, Hashable {
    /// `urn:problem:<code>`.
    public let type: String
    public let title: String
    /// The HTTP status.
    public let status: Int
    /// A sentence for people about this occurrence.
    public let detail: String
    /// The stable name to branch on.
    public let code: String
    /// The id of the request that got this answer (its `X-Request-Id`).
    public let instance: String
    /// Every member of the body, the ones above included.
    public let members: [String: JSONValue]
    /// The body as it arrived.
    public let body: Data
    /// The `Retry-After` header in seconds, when it had that form.
    public let retryAfterSeconds: Int?
    /// True when the answer is a stored one replayed for a retry (`Idempotent-Replayed: true`).
    public let replayed: Bool
    /// The Idempotency-Key the call sent, for the operations that take one.
    public let idempotencyKey: String?
    /// How many attempts the call made, this answer's included.
    public let attempts: Int

    /// Reads a problem body; nil when it is not a JSON object with every
    /// member a problem must have.
    init?(body: Data, retryAfterSeconds: Int?, replayed: Bool, idempotencyKey: String?, attempts: Int) {
        guard let value = try? JSONDecoder().decode(JSONValue.self, from: body), let members = value.objectValue,
              let type = members["type"]?.stringValue, let title = members["title"]?.stringValue,
              let status = members["status"]?.int64Value, let detail = members["detail"]?.stringValue,
              let code = members["code"]?.stringValue, let instance = members["instance"]?.stringValue,
              let statusCode = Int(exactly: status) else { return nil }
        self.type = type
        self.title = title
        self.status = statusCode
        self.detail = detail
        self.code = code
        self.instance = instance
        self.members = members
        self.body = body
        self.retryAfterSeconds = retryAfterSeconds
        self.replayed = replayed
        self.idempotencyKey = idempotencyKey
        self.attempts = attempts
    }

    /// An extra member the document requires for this code.
    func required<Value: Decodable>(_ name: String, as type: Value.Type) throws -> Value {
        guard let value = members[name] else { throw MissingMember(code: code, name: name) }
        do {
            return try JSONDecoder().decode(Value.self, from: JSONEncoder().encode(value))
        } catch {
            throw MissingMember(code: code, name: name)
        }
    }

    /// An extra member the document names without requiring it.
    func optional<Value: Decodable>(_ name: String, as type: Value.Type) throws -> Value? {
        guard let value = members[name], value != .null else { return nil }
        return try required(name, as: type)
    }

    struct MissingMember: Error, CustomStringConvertible {
        var code: String
        var name: String
        var description: String { "a \(code) problem without a valid \(name) member" }
    }
}

/// Every problem the service answers: catch a code by its own type
/// (`InsufficientFundsError`), or any of them as `any WalletProblemError`.
///
/// `description` is the code and title only; the detail, which may name
/// values from the request, is in `debugDescription` and `problem`.
public protocol WalletProblemError: Error, CustomStringConvertible, CustomDebugStringConvertible {
    var problem: ProblemDetails { get }
}

extension WalletProblemError {
    public var status: Int { problem.status }
    public var code: String { problem.code }
    public var title: String { problem.title }
    public var detail: String { problem.detail }
    public var instance: String { problem.instance }
    public var body: Data { problem.body }

    public var description: String {
        "\(problem.code) (HTTP \(problem.status)): \(problem.title)"
    }

    public var debugDescription: String {
        "\(problem.code) (HTTP \(problem.status)): \(problem.title): \(problem.detail) [instance \(problem.instance), "
            + "attempts \(problem.attempts)\(problem.replayed ? ", replayed" : "")]"
    }
}

/// A problem whose code this client does not know; the body is kept whole.
public struct UnknownProblemError: WalletProblemError {
    public let problem: ProblemDetails
}

/// The service could not be reached, or the connection failed before an
/// answer was read, on every attempt the call was allowed.
public struct WalletTransportError: Error, CustomStringConvertible {
    /// The last attempt's failure (a `URLError`, usually).
    public let underlying: any Error
    /// How many attempts the call made.
    public let attempts: Int
    /// The Idempotency-Key the call sent, for the operations that take one:
    /// retry with it, since the write may have been applied.
    public let idempotencyKey: String?

    public var description: String {
        "the wallet service could not be reached after \(attempts) attempt(s): \(underlying)"
    }
}

/// An answer that is not what the document says it would be: a success
/// whose body lacks a required member, an error that is not a problem
/// document, or a problem without a member its code requires.
public struct UnexpectedResponseError: Error, CustomStringConvertible {
    public let status: Int
    public let body: Data
    /// What was wrong with it.
    public let reason: String
    public let attempts: Int
    public let idempotencyKey: String?

    public var description: String {
        "unexpected answer from the wallet service (HTTP \(status)): \(reason)"
    }
}
