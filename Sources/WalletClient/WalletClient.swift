public import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// A client of the wallet service for a game server or an app backend.
///
/// Every call retries by itself, within bounds, when and only when a retry
/// cannot apply a write twice: see `RetryPolicy`. Writes that take an
/// Idempotency-Key send the same key on every attempt; without one from the
/// caller the client makes one (a UUID v4) per call.
///
/// One client per API key; it is safe to share between tasks.
public final class WalletClient: Sendable {
    public struct Configuration: Sendable {
        /// The service's base URL, such as `http://127.0.0.1:8080`; a path
        /// prefix is kept (`https://gateway.example/wallet`).
        public var baseURL: URL
        /// An API key (`wk_...`) with the scopes of the operations called.
        public var apiKey: String
        public var retryPolicy = RetryPolicy()
        /// Sent as `User-Agent`.
        public var userAgent = "wallet-client-swift/0.1"

        public init(baseURL: URL, apiKey: String, retryPolicy: RetryPolicy = RetryPolicy()) {
            self.baseURL = baseURL
            self.apiKey = apiKey
            self.retryPolicy = retryPolicy
        }
    }

    public let configuration: Configuration
    let session: URLSession
    let statisticsBox = StatisticsBox()

    public init(configuration: Configuration) {
        self.configuration = configuration
        let sessionConfiguration = URLSessionConfiguration.ephemeral
        sessionConfiguration.httpShouldSetCookies = false
        sessionConfiguration.urlCache = nil
        sessionConfiguration.requestCachePolicy = .reloadIgnoringLocalCacheData
        // The client bounds each attempt itself; these are backstops.
        let attemptSeconds = configuration.retryPolicy.requestTimeout.seconds
        sessionConfiguration.timeoutIntervalForRequest = max(1, attemptSeconds.rounded(.up))
        sessionConfiguration.timeoutIntervalForResource = max(1, configuration.retryPolicy.maxTotalTime.seconds.rounded(.up))
        session = URLSession(configuration: sessionConfiguration)
    }

    public convenience init(baseURL: URL, apiKey: String, retryPolicy: RetryPolicy = RetryPolicy()) {
        self.init(configuration: Configuration(baseURL: baseURL, apiKey: apiKey, retryPolicy: retryPolicy))
    }

    deinit {
        session.finishTasksAndInvalidate()
    }

    /// How many retries this client has made, over all its calls.
    public var retryCount: Int { statisticsBox.snapshot.retries }

    /// Calls, attempts and retries by cause, over all this client's calls.
    public var statistics: RetryStatistics { statisticsBox.snapshot }
}

/// When and how often a call is tried again. The rule is fixed; only its
/// bounds can be set.
///
/// A call is retried when, and only when:
/// 1. the answer is a problem with code `outcome_unknown` (the write may have
///    committed; the retry with the same flowNO or key replays it if so);
/// 2. the answer is 503 with a `Retry-After` header (nothing was written);
///    its delay-seconds are honoured, a pause cut to the time left;
/// 3. the connection failed before any answer was read (refused, reset,
///    closed, or the attempt timed out).
/// Without `Retry-After` the pause between attempts is exponential: 100 ms
/// doubling to 2 s, with jitter. When `maxAttempts` or `maxTotalTime` runs
/// out, the last error is raised.
public struct RetryPolicy: Sendable, Hashable {
    /// Attempts per call, the first included.
    public var maxAttempts: Int
    /// The longest a call may take, its pauses and attempts together.
    public var maxTotalTime: Duration
    /// The longest one attempt may take.
    public var requestTimeout: Duration
    /// The first pause without `Retry-After`; it doubles after each attempt.
    public var backoffFirst: Duration
    /// The longest pause without `Retry-After`.
    public var backoffMax: Duration

    public init(maxAttempts: Int = 8, maxTotalTime: Duration = .seconds(30), requestTimeout: Duration = .seconds(10),
                backoffFirst: Duration = .milliseconds(100), backoffMax: Duration = .seconds(2)) {
        precondition(maxAttempts >= 1, "a call makes at least one attempt")
        precondition(maxTotalTime > .zero && requestTimeout > .zero, "the time bounds must be positive")
        self.maxAttempts = maxAttempts
        self.maxTotalTime = maxTotalTime
        self.requestTimeout = requestTimeout
        self.backoffFirst = backoffFirst
        self.backoffMax = backoffMax
    }

    /// The pause after attempt `attempt` (1-based) when the answer set no
    /// `Retry-After`: between half and all of the doubled backoff.
    func backoff(after attempt: Int) -> Duration {
        let doublings = min(max(attempt - 1, 0), 30)
        let full = min(backoffMax.seconds, backoffFirst.seconds * Double(1 << doublings))
        return .seconds(full / 2 + Double.random(in: 0...(full / 2)))
    }
}

/// Counters of a client's calls, for monitoring and tests.
public struct RetryStatistics: Sendable, Hashable {
    public var calls = 0
    public var attempts = 0
    /// Attempts after the first, over all calls.
    public var retries = 0
    public var retriesAfterConnectionFailure = 0
    public var retriesAfterOutcomeUnknown = 0
    public var retriesAfterRetryAfter = 0
}

/// The answer to a write, with what the caller needs to know about its
/// idempotency. The body's members read through (`result.debit`).
@dynamicMemberLookup
public struct WriteResult<Value: Sendable>: Sendable {
    public let value: Value
    /// The HTTP status (201 for a new write, 200 for a credit's or a release's).
    public let status: Int
    /// True when the answer is a stored one replayed for a retry
    /// (`Idempotent-Replayed: true`): nothing was written this time.
    public let replayed: Bool
    /// The Idempotency-Key sent on every attempt; nil for a credit, whose flowNO is its key.
    public let idempotencyKey: String?
    /// The answer's `X-Request-Id`.
    public let requestID: String?
    public let attempts: Int

    public subscript<Member>(dynamicMember keyPath: KeyPath<Value, Member>) -> Member {
        value[keyPath: keyPath]
    }
}

final class StatisticsBox: @unchecked Sendable {
    // Every access to `value` holds `lock`.
    private let lock = NSLock()
    private var value = RetryStatistics()

    var snapshot: RetryStatistics {
        lock.lock()
        defer { lock.unlock() }
        return value
    }

    func update(_ change: (inout RetryStatistics) -> Void) {
        lock.lock()
        defer { lock.unlock() }
        change(&value)
    }
}

extension Duration {
    var seconds: Double {
        let (seconds, attoseconds) = components
        return Double(seconds) + Double(attoseconds) / 1e18
    }
}
