import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// One operation's request, the same on every attempt.
struct Call: Sendable {
    var method: String
    /// Percent-encoded, from the first `/`.
    var path: String
    var query: [(name: String, value: String)] = []
    var body: Data?
    var idempotencyKey: String?
}

/// A successful answer, decoded.
struct Answer<Value: Sendable>: Sendable {
    var value: Value
    var status: Int
    var replayed: Bool
    var requestID: String?
    var attempts: Int
}

extension WalletClient {
    /// Sends `call` until it gets a definitive answer or a bound runs out
    /// (`RetryPolicy` has the rule), and decodes the success as `Value`.
    func perform<Value: Decodable & Sendable>(_ call: Call, as type: Value.Type) async throws -> Answer<Value> {
        let policy = configuration.retryPolicy
        let clock = ContinuousClock()
        let deadline = clock.now + policy.maxTotalTime
        statisticsBox.update { $0.calls += 1 }
        var attempt = 0
        // Bounded by maxAttempts.
        while true {
            attempt += 1
            statisticsBox.update { $0.attempts += 1 }
            let timeLeft = clock.now.duration(to: deadline)
            let outcome = try await attemptOnce(call, as: type, attempt: attempt,
                                                timeout: min(policy.requestTimeout, timeLeft))
            let (error, cause, retryAfter): (any Error, RetryCause, Duration?)
            switch outcome {
            case .answered(let answer): return answer
            case .failed(let failure): throw failure
            case .retryable(let failure, let why, let delay): (error, cause, retryAfter) = (failure, why, delay)
            }
            guard attempt < policy.maxAttempts else { throw error }
            let left = clock.now.duration(to: deadline)
            guard left > .zero else { throw error }
            try await Task.sleep(for: min(retryAfter ?? policy.backoff(after: attempt), left))
            guard clock.now < deadline else { throw error }
            statisticsBox.update { statistics in
                statistics.retries += 1
                switch cause {
                case .connection: statistics.retriesAfterConnectionFailure += 1
                case .outcomeUnknown: statistics.retriesAfterOutcomeUnknown += 1
                case .retryAfter: statistics.retriesAfterRetryAfter += 1
                }
            }
        }
    }

    enum RetryCause {
        case connection, outcomeUnknown, retryAfter
    }

    enum Outcome<Value: Sendable> {
        case answered(Answer<Value>)
        case failed(any Error)
        case retryable(any Error, RetryCause, retryAfter: Duration?)
    }

    private func attemptOnce<Value: Decodable & Sendable>(_ call: Call, as type: Value.Type, attempt: Int,
                                                         timeout: Duration) async throws -> Outcome<Value> {
        let request = try urlRequest(for: call, timeout: timeout)
        let data: Data
        let response: HTTPURLResponse
        do {
            (data, response) = try await exchange(request, timeout: timeout)
        } catch {
            try Task.checkCancellation()
            let failure = WalletTransportError(underlying: error, attempts: attempt, idempotencyKey: call.idempotencyKey)
            return Self.isConnectionFailure(error) ? .retryable(failure, .connection, retryAfter: nil) : .failed(failure)
        }
        let status = response.statusCode
        let retryAfterHeader = response.value(forHTTPHeaderField: "Retry-After")
        let retryAfterSeconds = retryAfterHeader.flatMap(Self.delaySeconds)
        let replayed = response.value(forHTTPHeaderField: "Idempotent-Replayed") == "true"
        if (200..<300).contains(status) {
            do {
                let value = try JSONDecoder().decode(Value.self, from: data)
                return .answered(Answer(value: value, status: status, replayed: replayed,
                                        requestID: response.value(forHTTPHeaderField: "X-Request-Id"), attempts: attempt))
            } catch {
                return .failed(UnexpectedResponseError(status: status, body: data, reason: "the body is not a \(Value.self): \(error)",
                                                       attempts: attempt, idempotencyKey: call.idempotencyKey))
            }
        }

        let error: any Error
        var code: String?
        if let problem = ProblemDetails(body: data, retryAfterSeconds: retryAfterSeconds, replayed: replayed,
                                        idempotencyKey: call.idempotencyKey, attempts: attempt) {
            code = problem.code
            do {
                error = try ProblemCatalog.error(for: problem)
            } catch let malformed {
                error = UnexpectedResponseError(status: status, body: data, reason: "\(malformed)", attempts: attempt,
                                                idempotencyKey: call.idempotencyKey)
            }
        } else {
            error = UnexpectedResponseError(status: status, body: data, reason: "the answer is not a problem document",
                                            attempts: attempt, idempotencyKey: call.idempotencyKey)
        }
        let retryAfter = retryAfterSeconds.map { Duration.seconds($0) }
        if code == OutcomeUnknownError.code {
            return .retryable(error, .outcomeUnknown, retryAfter: retryAfter)
        }
        if status == 503, retryAfterHeader != nil {
            return .retryable(error, .retryAfter, retryAfter: retryAfter)
        }
        return .failed(error)
    }

    /// One HTTP exchange, given up after `timeout` whatever the session's
    /// own timers do.
    ///
    /// A data task with a completion handler rather than `URLSession.data(for:)`:
    /// on Linux that one cancels its task from inside the Swift task's
    /// cancellation handler, which holds the task's status lock while it
    /// waits for the session's queue, and the session's queue may be waiting
    /// for that lock to resume the same task: a deadlock, seen in this
    /// client's chaos test. Here a cancellation, or the timeout, cancels
    /// the data task from another thread, holding nothing.
    private func exchange(_ request: URLRequest, timeout: Duration) async throws -> (Data, HTTPURLResponse) {
        let session = session
        let exchange = Exchange()
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<(Data, HTTPURLResponse), any Error>) in
                let task = session.dataTask(with: request) { data, response, error in
                    if let error {
                        continuation.resume(throwing: exchange.timedOut ? URLError(.timedOut) : error)
                    } else if let http = response as? HTTPURLResponse {
                        continuation.resume(returning: (data ?? Data(), http))
                    } else {
                        continuation.resume(throwing: URLError(.badServerResponse))
                    }
                }
                exchange.start(task)
                DispatchQueue.global().asyncAfter(deadline: .now() + timeout.seconds) { exchange.timeOut() }
            }
        } onCancel: {
            DispatchQueue.global().async { exchange.cancel() }
        }
    }

    /// A failure of the connection before any answer was read: refused,
    /// reset, closed without an answer, or timed out.
    static func isConnectionFailure(_ error: any Error) -> Bool {
        guard let error = error as? URLError else { return false }
        switch error.code {
        case .cannotConnectToHost, .networkConnectionLost, .timedOut, .notConnectedToInternet, .cannotFindHost,
             .dnsLookupFailed, .badServerResponse:
            return true
        case .unknown:
            #if canImport(FoundationNetworking)
            // On Linux, URLSession maps only some of libcurl's failures to a
            // code: a refused connection whose errno libcurl did not keep, or
            // a send or receive that failed (a broken pipe), is `unknown`,
            // with libcurl's message as the description.
            let message = error.localizedDescription.lowercased()
            return curlConnectionFailures.contains { message.contains($0) }
            #else
            return false
            #endif
        default:
            return false
        }
    }

    /// libcurl's messages for a connection that failed before an answer.
    static let curlConnectionFailures = [
        "couldn't connect", "failed to connect", "connection refused", "send failure", "failed sending data",
        "recv failure", "failure when receiving data", "connection reset", "empty reply", "server returned nothing",
    ]

    /// `Retry-After` as delay-seconds; nil for an HTTP date or anything else.
    static func delaySeconds(_ header: String) -> Int? {
        let text = header.trimmingCharacters(in: .whitespaces)
        guard !text.isEmpty, text.count <= 9, text.allSatisfy({ $0.isASCII && $0.isNumber }) else { return nil }
        return Int(text)
    }

    private func urlRequest(for call: Call, timeout: Duration) throws -> URLRequest {
        guard var components = URLComponents(url: configuration.baseURL, resolvingAgainstBaseURL: false) else {
            throw URLError(.badURL)
        }
        var prefix = components.percentEncodedPath
        while prefix.hasSuffix("/") { prefix.removeLast() }
        components.percentEncodedPath = prefix + call.path
        components.percentEncodedQuery = call.query.isEmpty ? nil : call.query
            .map { "\(Self.escape($0.name, allowing: Self.unreserved))=\(Self.escape($0.value, allowing: Self.unreserved))" }
            .joined(separator: "&")
        guard let url = components.url else { throw URLError(.badURL) }
        var request = URLRequest(url: url)
        request.httpMethod = call.method
        request.timeoutInterval = max(1, timeout.seconds.rounded(.up))
        request.setValue("Bearer \(configuration.apiKey)", forHTTPHeaderField: "Authorization")
        request.setValue("application/json, application/problem+json", forHTTPHeaderField: "Accept")
        request.setValue(configuration.userAgent, forHTTPHeaderField: "User-Agent")
        if let key = call.idempotencyKey { request.setValue(key, forHTTPHeaderField: "Idempotency-Key") }
        if let body = call.body {
            request.setValue("application/json", forHTTPHeaderField: "Content-Type")
            request.httpBody = body
        }
        return request
    }

    static let unreserved = CharacterSet(charactersIn: "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
    /// A path segment keeps `:` and `@`, which ids may hold.
    static let segmentAllowed = unreserved.union(CharacterSet(charactersIn: ":@"))

    static func escape(_ text: String, allowing allowed: CharacterSet) -> String {
        text.addingPercentEncoding(withAllowedCharacters: allowed) ?? ""
    }

    /// `/v1/wallets/{user_id}`-style paths: every segment escaped.
    static func path(_ segments: String...) -> String {
        segments.map { "/" + escape($0, allowing: segmentAllowed) }.joined()
    }
}

/// One data task and what ended it early, shared by the completion handler,
/// the timer and the cancellation handler.
private final class Exchange: @unchecked Sendable {
    // Every access to the variables holds `lock`; `cancel()` on a task is
    // called after leaving it.
    private let lock = NSLock()
    private var task: URLSessionDataTask?
    private var cancelled = false
    private var expired = false

    var timedOut: Bool {
        lock.withLock { expired }
    }

    /// Resumes the task, or cancels it if the call was cancelled already.
    func start(_ task: URLSessionDataTask) {
        let cancelled = lock.withLock {
            self.task = task
            return self.cancelled
        }
        if cancelled { task.cancel() } else { task.resume() }
    }

    func timeOut() {
        lock.withLock {
            expired = true
            return task
        }?.cancel()
    }

    func cancel() {
        lock.withLock {
            cancelled = true
            return task
        }?.cancel()
    }
}
