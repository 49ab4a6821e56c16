public import Foundation
import Locking
#if canImport(FoundationNetworking)
public import FoundationNetworking
#endif

/// One HTTP request, waited for on the calling thread until a deadline.
///
/// Each exchange has its own ephemeral `URLSession` with this object as its
/// delegate, so the answer is read piece by piece and cut off at
/// `responseBytesMax` instead of being buffered whole first. Redirects are
/// not followed; the caller sees the 3xx status instead.
public final class HTTPExchange: NSObject, URLSessionDataDelegate, @unchecked Sendable {
    public enum Outcome: Sendable {
        /// An HTTP answer: its status, its `Retry-After` header, and its
        /// whole body.
        case response(status: Int, retryAfter: String?, body: Data)
        /// No answer (no connection, the time limit, a body too large), in
        /// words for logs.
        case failure(String)
    }

    private let responseBytesMax: Int
    /// Keep the first `responseBytesMax` bytes of a longer answer instead
    /// of failing it (for a caller that needs only the status).
    private let truncating: Bool
    private struct State: Sendable {
        /// The task of the request under way: a late callback of an earlier
        /// one (cancelled at its deadline) is ignored.
        var task = -1
        var received = Data()
        var status = 0
        var retryAfter: String?
        /// The first outcome; the caller waits for it.
        var outcome: Outcome?
    }

    /// URLSession calls the delegate on its own queue while the caller waits
    /// on another thread.
    private let state = Monitor(State())

    fileprivate init(responseBytesMax: Int, truncating: Bool) {
        self.responseBytesMax = responseBytesMax
        self.truncating = truncating
    }

    /// Sends `request` and waits for the answer until `deadline`, never
    /// longer. An answer longer than `responseBytesMax` is a failure, or,
    /// `truncating`, an answer with the first `responseBytesMax` bytes.
    public static func send(_ request: URLRequest, responseBytesMax: Int, deadline: ContinuousClock.Instant,
                            truncating: Bool = false) -> Outcome {
        let remaining = ContinuousClock.now.duration(to: deadline)
        guard remaining > .zero else { return .failure("no time was left to ask") }
        let remainingSeconds = Double(remaining.components.seconds) + Double(remaining.components.attoseconds) / 1e18
        let exchange = HTTPExchange(responseBytesMax: responseBytesMax, truncating: truncating)
        let session = exchange.session(backstopSeconds: remainingSeconds)
        // The session holds its delegate until it is invalidated.
        defer { session.invalidateAndCancel() }
        return exchange.perform(request, on: session, deadline: deadline)
    }

    /// An ephemeral session with this exchange as its delegate. The caller's
    /// wait is the real limit; URLSession's own limits are only a backstop,
    /// set well past it: the Linux URLSession truncates them to whole
    /// seconds, so 0.9 s would become an immediate time-out.
    fileprivate func session(backstopSeconds: Double) -> URLSession {
        let configuration = URLSessionConfiguration.ephemeral
        configuration.timeoutIntervalForRequest = backstopSeconds.rounded(.up) + 5
        configuration.timeoutIntervalForResource = backstopSeconds.rounded(.up) + 5
        configuration.requestCachePolicy = .reloadIgnoringLocalCacheData
        configuration.urlCache = nil
        configuration.httpCookieStorage = nil
        configuration.httpShouldSetCookies = false
        return URLSession(configuration: configuration, delegate: self, delegateQueue: nil)
    }

    /// One request on `session` (whose delegate this is), waited for until
    /// `deadline`; the task is cancelled then.
    fileprivate func perform(_ request: URLRequest, on session: URLSession, deadline: ContinuousClock.Instant) -> Outcome {
        guard ContinuousClock.now < deadline else { return .failure("no time was left to ask") }
        let task = session.dataTask(with: request)
        state.withLock { $0 = State(task: task.taskIdentifier) }
        task.resume()
        guard let outcome = state.wait(until: deadline, for: { $0.outcome != nil }, then: { state, _ in
            state.outcome
        }) else {
            task.cancel()
            return .failure("no answer within the time limit")
        }
        return outcome
    }

    /// Records the first outcome of `task` only and wakes the caller once.
    private func finish(_ result: Outcome, task: URLSessionTask) {
        let isFirst = state.withLock { state in
            guard state.task == task.taskIdentifier, state.outcome == nil else { return false }
            state.outcome = result
            return true
        }
        if isFirst { state.broadcast() }
    }

    public func urlSession(
        _ session: URLSession,
        dataTask: URLSessionDataTask,
        didReceive response: URLResponse,
        completionHandler: @Sendable @escaping (URLSession.ResponseDisposition) -> Void
    ) {
        guard let http = response as? HTTPURLResponse else {
            finish(.failure("the answer is not HTTP"), task: dataTask)
            completionHandler(.cancel)
            return
        }
        state.withLock { state in
            guard state.task == dataTask.taskIdentifier else { return }
            state.status = http.statusCode
            state.retryAfter = http.value(forHTTPHeaderField: "Retry-After")
        }
        guard truncating || http.expectedContentLength <= Int64(responseBytesMax) else {
            finish(.failure("the answer announces more than \(responseBytesMax) bytes"), task: dataTask)
            completionHandler(.cancel)
            return
        }
        completionHandler(.allow)
    }

    public func urlSession(_ session: URLSession, dataTask: URLSessionDataTask, didReceive data: Data) {
        let cut: (status: Int, retryAfter: String?, body: Data)? = state.withLock { state in
            guard state.task == dataTask.taskIdentifier else { return nil }
            guard state.received.count + data.count > responseBytesMax else {
                state.received.append(data)
                return nil
            }
            state.received.append(data.prefix(responseBytesMax - state.received.count))
            return (state.status, state.retryAfter, state.received)
        }
        guard let cut else { return }
        finish(truncating ? .response(status: cut.status, retryAfter: cut.retryAfter, body: cut.body)
                          : .failure("the answer is larger than \(responseBytesMax) bytes"), task: dataTask)
        dataTask.cancel()
    }

    public func urlSession(_ session: URLSession, task: URLSessionTask, didCompleteWithError error: (any Error)?) {
        if let error {
            let code = (error as? URLError).map { " (URLError \($0.code.rawValue))" } ?? ""
            finish(.failure("the request failed\(code)"), task: task)
        } else {
            let answer = state.withLock { ($0.status, $0.retryAfter, $0.received) }
            finish(.response(status: answer.0, retryAfter: answer.1, body: answer.2), task: task)
        }
    }

    public func urlSession(
        _ session: URLSession,
        task: URLSessionTask,
        willPerformHTTPRedirection response: HTTPURLResponse,
        newRequest request: URLRequest,
        completionHandler: @Sendable @escaping (URLRequest?) -> Void
    ) {
        // The stores' endpoints do not redirect; following one would send a
        // receipt, a shared secret or a signed token somewhere else.
        completionHandler(nil)
    }
}
