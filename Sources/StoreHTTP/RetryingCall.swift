public import Foundation
public import Locking
#if canImport(FoundationNetworking)
public import FoundationNetworking
#endif

/// An exchange's class: the only values of the `status` label of every
/// store-call metric.
public enum StatusClass: String, Sendable, CaseIterable {
    case success = "2xx"
    case clientError = "4xx"
    case serverError = "5xx"
    /// No HTTP answer: no connection, the time limit, a body too large.
    case error

    public init(status: Int) {
        switch status {
        case 200..<300: self = .success
        case 500..<600: self = .serverError
        default: self = .clientError
        }
    }
}

/// One call to a store's server API (Apple's or Google's), tried again for
/// as long as the store may get over it and the caller's deadline allows.
///
/// An HTTP 429 or 5xx, or no answer at all, is tried again after a pause:
/// the store's `Retry-After` when it gives one, else a backoff doubling from
/// 0.25 s to 4 s, as long as the pause ends before the deadline. Any other
/// status is final, and so is a success. The request is built afresh for
/// every attempt, so a signed token in it is always new.
///
/// The pauses are on the caller's clock, and each takes its whole length
/// out of the call's time as that clock counts it, so a test's clock that
/// ends them early makes the same attempts in less time, not more of them.
public enum RetryingCall {
    public enum Answer: Sendable {
        /// A success, or a status that retrying does not change.
        case final(status: Int, body: Data)
        /// Still failing at the deadline (or the request could not be
        /// built), in words for logs.
        case unavailable(String)
    }

    /// The longest pause honoured from `Retry-After`; a longer one is past
    /// any deadline these calls are given.
    public static let retryAfterSecondsMax = 60.0

    /// `observe` gets each exchange's status class and its seconds; `name`
    /// says which call failed in `unavailable`'s words; `clock` times the
    /// pauses between attempts.
    public static func send(name: String, responseBytesMax: Int, deadline: ContinuousClock.Instant,
                            clock: any WorkClock = SystemClock(), observe: (StatusClass, Double) -> Void,
                            _ makeRequest: () throws -> URLRequest) -> Answer {
        var backoffSeconds = 0.25
        var lastFailure = "no attempt was made"
        // Moved earlier by however much less real time a pause took than it
        // lasted on the clock; on the real clock, the deadline as given.
        var deadline = deadline
        // Bounded by the deadline: every pass waits or fails before it.
        while ContinuousClock.now < deadline {
            let request: URLRequest
            do {
                request = try makeRequest()
            } catch {
                return .unavailable("\(name): the request could not be made (\(error))")
            }
            let started = ContinuousClock.now
            let outcome = HTTPExchange.send(request, responseBytesMax: responseBytesMax, deadline: deadline)
            let elapsed = started.duration(to: .now)
            let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18

            var pauseSeconds = backoffSeconds
            switch outcome {
            case .failure(let detail):
                observe(.error, seconds)
                lastFailure = detail
            case .response(let status, let retryAfter, let body):
                observe(StatusClass(status: status), seconds)
                guard status == 429 || (500..<600).contains(status) else { return .final(status: status, body: body) }
                lastFailure = "HTTP status \(status)"
                if let wait = retryAfterSeconds(retryAfter) { pauseSeconds = wait }
            }
            guard ContinuousClock.now + .seconds(pauseSeconds) < deadline else { break }
            let pauseStarted = ContinuousClock.now
            clock.pause(seconds: pauseSeconds)
            deadline = deadline - max(.zero, .seconds(pauseSeconds) - pauseStarted.duration(to: .now))
            backoffSeconds = min(backoffSeconds * 2, 4)
        }
        return .unavailable("\(name): \(lastFailure)")
    }

    /// `Retry-After` as seconds: a number, or an HTTP date.
    public static func retryAfterSeconds(_ value: String?) -> Double? {
        guard let value = value?.trimmingCharacters(in: .whitespaces), !value.isEmpty else { return nil }
        if let seconds = Int(value), seconds >= 0 { return min(Double(seconds), retryAfterSecondsMax) }
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "GMT")
        formatter.dateFormat = "EEE, dd MMM yyyy HH:mm:ss zzz"
        guard let date = formatter.date(from: value) else { return nil }
        return min(max(date.timeIntervalSinceNow, 0), retryAfterSecondsMax)
    }

    /// Percent-encodes everything but RFC 3986's unreserved set, so the text
    /// is safe as one path segment or one query value.
    public static func percentEncoded(_ text: String) -> String {
        text.addingPercentEncoding(withAllowedCharacters: unreserved) ?? ""
    }

    private static let unreserved = CharacterSet(
        charactersIn: "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
}
