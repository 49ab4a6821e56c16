public import Foundation
public import Crypto
import JSON
public import Locking
public import StoreHTTP
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// OAuth 2.0 access tokens for a service account, by the JWT bearer grant
/// (RFC 7523 §2.1) that Google's token endpoint takes.
///
/// The request is `POST token_uri` with the form body
/// `grant_type=urn:ietf:params:oauth:grant-type:jwt-bearer&assertion=<JWT>`.
/// The assertion is a JWT signed RS256 with the account's key:
///
/// - header: `alg` RS256, `typ` JWT, and `kid` the `private_key_id` when the
///   key file has one;
/// - claims: `iss` the `client_email`, `scope` the API's scope (the Android
///   Publisher's, or Pub/Sub's for reading the push subscription), `aud` the
///   `token_uri`, `iat` now and `exp` an hour later, Google's most.
///
/// Google answers `access_token`, `expires_in` (seconds, 3599 as a rule) and
/// `token_type` Bearer. A token is kept until five minutes before it expires,
/// or half its life if that is shorter, and shared by every caller. Only one
/// grant is in flight at a time: callers that need a token meanwhile wait for
/// it, each no longer than its own deadline, and get its outcome, failure
/// included. A failure is not kept: the next caller after it asks again.
public final class AccessTokens: Sendable {
    public static let grantType = "urn:ietf:params:oauth:grant-type:jwt-bearer"
    /// The assertion's life: Google refuses an `exp` more than an hour after `iat`.
    public static let assertionLifetimeSeconds: Int64 = 3_600
    /// How long before its expiry a token is replaced, at most.
    public static let refreshMarginSecondsMax = 300.0
    /// Longest `expires_in` believed; Google's tokens live an hour.
    public static let lifetimeSecondsMax = 86_400
    /// Largest token endpoint answer read; Google's are under 2 kB.
    public static let answerBytesMax = 64 * 1024
    /// Longest access token accepted; Google's are a few hundred bytes.
    public static let tokenBytesMax = 8 * 1024

    public let account: ServiceAccount
    /// The OAuth scope the tokens are granted for.
    public let scope: String
    /// Times the tokens' lives and the pauses between retries of a grant.
    public let clock: any WorkClock
    private let observe: @Sendable (PlayClient.StatusClass, Double) -> Void
    private let state = Monitor(State())

    private struct Token: Sendable {
        var value: String
        /// After this (on `clock`), the token is replaced before use.
        var refreshAt: ContinuousClock.Instant
    }

    private struct State: Sendable {
        var current: Token?
        var fetching = false
        /// Grants finished, either way; a waiter watches it move.
        var fetchesFinished = 0
        /// The outcome of the last grant when it failed.
        var lastFailure: PlayAPIError?
    }

    /// `observe` gets each token endpoint exchange's status class and seconds.
    public init(account: ServiceAccount, scope: String = GooglePlay.androidPublisherScope,
                clock: any WorkClock = SystemClock(),
                observe: @escaping @Sendable (PlayClient.StatusClass, Double) -> Void = { _, _ in }) {
        self.account = account
        self.scope = scope
        self.clock = clock
        self.observe = observe
    }

    /// A token to send as `Authorization: Bearer …`: the kept one while it
    /// is fresh, else a new one from the token endpoint, waited for no longer
    /// than `deadline`.
    public func token(deadline: ContinuousClock.Instant) throws(PlayAPIError) -> String {
        enum Step {
            case use(String)
            case fetch
            case wait(afterFetches: Int)
        }
        // A caller waits at most for the grant in flight and the one it may
        // then start itself; a third round means tokens are being dropped as
        // fast as they come, and the deadline bounds even that.
        for _ in 0..<3 {
            let step = state.withLock { state -> Step in
                if let token = state.current, clock.now < token.refreshAt { return .use(token.value) }
                if state.fetching { return .wait(afterFetches: state.fetchesFinished) }
                state.fetching = true
                return .fetch
            }
            switch step {
            case .use(let token):
                return token
            case .fetch:
                return try fetchAndShare(deadline: deadline)
            case .wait(let seen):
                let outcome = state.wait(until: deadline, for: { $0.fetchesFinished > seen }) {
                    state, finished -> Result<String, PlayAPIError>? in
                    guard finished else {
                        return .failure(.unavailable("token: no access token within the time limit"))
                    }
                    if let token = state.current, clock.now < token.refreshAt { return .success(token.value) }
                    if let failure = state.lastFailure { return .failure(failure) }
                    // Fetched, then dropped already: go round again.
                    return nil
                }
                if let outcome { return try outcome.get() }
            }
        }
        throw .unavailable("token: the access token was dropped as soon as it came")
    }

    /// Drops the kept token, so the next caller fetches a new one.
    public func invalidate() {
        state.withLock { $0.current = nil }
    }

    /// Drops the kept token if it is still `token`: a caller whose request
    /// was refused with it must not drop a newer one that another caller has
    /// fetched meanwhile.
    public func invalidate(token: String) {
        state.withLock { state in
            if state.current?.value == token { state.current = nil }
        }
    }

    /// The signed assertion for `account` at `now`, asking for `scope`.
    public static func assertion(for account: ServiceAccount, scope: String = GooglePlay.androidPublisherScope,
                                 now: Date) throws(RSAPrivateKey.KeyError) -> String {
        let issuedAt = Int64(now.timeIntervalSince1970.rounded(.down))
        // Members in key order, as the assertion has always been written.
        var header: [(key: String, value: JSONValue)] = [("alg", "RS256")]
        if let keyID = account.privateKeyID { header.append(("kid", .string(keyID))) }
        header.append(("typ", "JWT"))
        let claims: JSONValue = [
            "aud": .string(account.tokenURI.absoluteString), "exp": JSONValue(issuedAt + assertionLifetimeSeconds),
            "iat": JSONValue(issuedAt), "iss": .string(account.clientEmail), "scope": .string(scope),
        ]
        let signingInput = Base64URL.encode(JSONValue.object(header).serialized()) + "." + Base64URL.encode(claims.serialized())
        let signature = try account.privateKey.signRS256(Array(signingInput.utf8))
        return signingInput + "." + Base64URL.encode(signature)
    }

    // MARK: The grant

    /// Runs one grant as the only fetcher, then hands its outcome to the
    /// waiters.
    private func fetchAndShare(deadline: ContinuousClock.Instant) throws(PlayAPIError) -> String {
        let outcome: Result<Token, PlayAPIError>
        do {
            outcome = .success(try fetch(deadline: deadline))
        } catch {
            outcome = .failure(error)
        }
        state.withLock { state in
            state.fetching = false
            state.fetchesFinished += 1
            switch outcome {
            case .success(let token):
                state.current = token
                state.lastFailure = nil
            case .failure(let failure):
                state.lastFailure = failure
            }
        }
        state.broadcast()
        return try outcome.get().value
    }

    private func fetch(deadline: ContinuousClock.Instant) throws(PlayAPIError) -> Token {
        var sentAt = clock.now
        let answer = RetryingCall.send(
            name: PlayClient.Endpoint.token.rawValue, responseBytesMax: Self.answerBytesMax, deadline: deadline,
            clock: clock, observe: observe
        ) {
            // Signed afresh for every attempt, so a retry never sends an
            // assertion older than the call.
            let assertion = try Self.assertion(for: account, scope: scope, now: Date())
            sentAt = clock.now
            var request = URLRequest(url: account.tokenURI)
            request.httpMethod = "POST"
            request.setValue("application/x-www-form-urlencoded", forHTTPHeaderField: "Content-Type")
            request.setValue("application/json", forHTTPHeaderField: "Accept")
            request.httpBody = Data(("grant_type=" + RetryingCall.percentEncoded(Self.grantType)
                + "&assertion=" + RetryingCall.percentEncoded(assertion)).utf8)
            return request
        }
        switch answer {
        case .unavailable(let detail):
            throw .unavailable(detail)
        case .final(200..<300, let body):
            return try Self.token(from: body, sentAt: sentAt)
        case .final(let status, let body):
            // Even a 404 is the token endpoint's refusal, not a missing purchase.
            throw .refused(status: status, reason: PlayAPIError.reason(body))
        }
    }

    /// The token in a grant's answer; its life is counted from when the
    /// request left, so it is never believed to live longer than it does.
    private static func token(from body: Data, sentAt: ContinuousClock.Instant) throws(PlayAPIError) -> Token {
        guard let object = try? JSONParser.parse(body), object.objectMembers != nil else {
            throw .malformedAnswer("the token answer is not a JSON object")
        }
        guard let value = object["access_token"]?.stringValue, !value.isEmpty, value.utf8.count <= tokenBytesMax,
              // It goes into a header: visible ASCII only.
              value.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7F })
        else { throw .malformedAnswer("the token answer has no usable access_token") }
        guard let type = object["token_type"]?.stringValue, type.lowercased() == "bearer" else {
            throw .malformedAnswer("the token answer's token_type is not Bearer")
        }
        guard let lifetime = object["expires_in"]?.doubleValue, lifetime.rounded(.down) == lifetime,
              lifetime >= 1, lifetime <= Double(lifetimeSecondsMax)
        else { throw .malformedAnswer("the token answer's expires_in is not 1 to \(lifetimeSecondsMax) seconds") }
        let margin = min(refreshMarginSecondsMax, lifetime / 2)
        return Token(value: value, refreshAt: sentAt + .seconds(lifetime - margin))
    }
}
