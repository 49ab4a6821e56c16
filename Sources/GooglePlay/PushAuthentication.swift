import Crypto
public import Foundation
import JSON
public import Locking
public import StoreHTTP
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// Why a Pub/Sub push was not authenticated. The raw values are stable and
/// safe to return to clients and to count in metrics.
public enum PushAuthenticationReason: String, Sendable, Equatable, CaseIterable {
    /// No `Authorization` header, or not `Bearer <token>`.
    case missing_token
    /// Not a compact JWS: three base64url segments with a JSON header and
    /// payload, at most `PushAuthenticator.tokenBytesMax` bytes, a header
    /// with a string `kid` and no `crit`.
    case malformed
    /// The header's `alg` is not exactly `RS256`.
    case wrong_algorithm
    /// No published Google key has the token's `kid`, even after a refresh
    /// (or a refresh was not allowed yet).
    case unknown_key
    /// The RS256 signature does not verify with the key the `kid` names.
    case bad_signature
    /// `iss` is neither `accounts.google.com` nor `https://accounts.google.com`.
    case wrong_issuer
    /// `aud` does not name the configured audience.
    case wrong_audience
    /// `email` is not the configured push service account.
    case wrong_email
    /// `email_verified` is not true.
    case email_not_verified
    /// `exp` is missing, not a number, or passed (beyond the clock skew).
    case expired
    /// `iat` lies further in the future than the clock skew allows.
    case not_yet_valid
    /// Google's keys could not be fetched when one was needed. Not the
    /// sender's fault: answer so that Pub/Sub retries (5xx), not 401.
    case keys_unavailable
}

/// A refused push token: a stable reason and a sentence for logs.
///
/// Neither `description` nor `detail` holds any part of the token: claims
/// are named, never quoted, so nothing a sender puts in a token reaches a
/// log line.
public struct PushAuthenticationError: Error, Sendable, Equatable, CustomStringConvertible {
    public typealias Reason = PushAuthenticationReason

    public let reason: Reason
    public let detail: String

    init(_ reason: Reason, _ detail: String) {
        self.reason = reason
        self.detail = detail
    }

    /// Whether the push should be tried again later: the fault is ours or
    /// Google's key endpoint, not the sender's.
    public var isRetryable: Bool { reason == .keys_unavailable }

    public var description: String { "\(reason.rawValue): \(detail)" }
}

/// What a verified push token says.
public struct PushClaims: Sendable, Equatable {
    /// The service account the push subscription authenticates as.
    public var email: String
    /// The configured audience, which the token's `aud` named.
    public var audience: String
    public var issuer: String
    /// `sub`: the service account's unique numeric id.
    public var subject: String?
    public var expiresAt: Date
    public var issuedAt: Date?

    public init(email: String, audience: String, issuer: String, subject: String?, expiresAt: Date, issuedAt: Date?) {
        self.email = email
        self.audience = audience
        self.issuer = issuer
        self.subject = subject
        self.expiresAt = expiresAt
        self.issuedAt = issuedAt
    }
}

/// Authenticates Google Cloud Pub/Sub push requests.
///
/// A push subscription with authentication sends `Authorization: Bearer
/// <token>`, an OIDC ID token that Google signs with RS256 for the
/// subscription's service account. Google publishes its signing keys as a
/// JWKS (`https://www.googleapis.com/oauth2/v3/certs`). The checks run in
/// this order, each with its own reason: the header, the token's shape, the
/// algorithm, the key, the signature, then the claims `iss`, `aud`, `email`,
/// `email_verified`, `exp` and `iat`.
///
/// Keys are cached by `kid`:
/// - fetched on first need, and again when the set is older than
///   `keysMaxAgeSeconds`;
/// - fetched again when a token names a `kid` the set lacks, but at most once
///   per `refreshIntervalMinSeconds`, so tokens with made-up `kid`s cost at
///   most one fetch in that time; meanwhile they fail `unknown_key`;
/// - after a failed fetch with no usable set, tried again at most once per
///   `retryWithoutKeysSeconds`; meanwhile tokens fail `keys_unavailable`.
///
/// A fetched set replaces the held one whole, so a key Google withdraws is
/// dropped with the next fetch; a failed fetch, or an answer with no usable
/// key, leaves the held set as it was. The answer's `Cache-Control: max-age`
/// (about six hours at Google) is not read, since `HTTPExchange` reports no
/// other header than `Retry-After`; the fixed hour is shorter.
///
/// One fetch runs at a time, on the thread of the token that needed it;
/// other callers that need its result wait for it until their own deadline
/// (`timeoutSeconds` from the start of their `verify`). A fetch blocks, so
/// `verify` must not run on a server thread without a deadline of its own.
///
/// The cache ages and the token times both follow `verify`'s `now` (by
/// default the authenticator's clock), so one clock decides both, and tests
/// can move it. The pauses between a fetch's retries are on that clock too.
public final class PushAuthenticator: Sendable {
    /// Google's published OAuth 2 / OIDC signing keys.
    public static let googleCertsURL = URL(string: "https://www.googleapis.com/oauth2/v3/certs")!
    /// The two issuer spellings Google uses in ID tokens.
    public static let googleIssuers: Set<String> = ["accounts.google.com", "https://accounts.google.com"]
    /// Largest token accepted. Google's ID tokens are about 1 kB.
    public static let tokenBytesMax = 8 * 1024
    /// Largest key set kept: the first this many usable keys of an answer.
    /// Google publishes two or three at a time.
    public static let keysMax = 32
    /// Longest `kid` kept from the key set.
    static let keyIDCharactersMax = 256

    public struct Configuration: Sendable {
        public var jwksURL: URL
        /// The audience set on the push subscription (by default its push
        /// endpoint URL).
        public var audience: String
        /// The service account the push subscription authenticates as.
        public var serviceAccountEmail: String
        /// The longest one `verify` waits for keys, fetch and retries included.
        public var timeoutSeconds: Double
        /// Largest key-set answer read.
        public var responseBytesMax: Int
        /// The shortest time between two fetches for unknown `kid`s.
        public var refreshIntervalMinSeconds: Double
        /// Tolerance for `exp` and `iat` against our clock.
        public var clockSkewSeconds: Double
        /// A fetched key set is used this long, then fetched again. Google
        /// announces new keys well before signing with them.
        public var keysMaxAgeSeconds: Double
        /// The shortest time between two fetches while no usable set is held.
        public var retryWithoutKeysSeconds: Double

        public init(jwksURL: URL = PushAuthenticator.googleCertsURL, audience: String, serviceAccountEmail: String,
                    timeoutSeconds: Double = 5, responseBytesMax: Int = 64 * 1024, refreshIntervalMinSeconds: Double = 60,
                    clockSkewSeconds: Double = 60, keysMaxAgeSeconds: Double = 3_600, retryWithoutKeysSeconds: Double = 5) {
            self.jwksURL = jwksURL
            self.audience = audience
            self.serviceAccountEmail = serviceAccountEmail
            self.timeoutSeconds = timeoutSeconds
            self.responseBytesMax = responseBytesMax
            self.refreshIntervalMinSeconds = refreshIntervalMinSeconds
            self.clockSkewSeconds = clockSkewSeconds
            self.keysMaxAgeSeconds = keysMaxAgeSeconds
            self.retryWithoutKeysSeconds = retryWithoutKeysSeconds
        }
    }

    /// A key-set answer's class: the only values of a `status` metric label.
    public typealias StatusClass = StoreHTTP.StatusClass

    private struct KeyCache: Sendable {
        var keys = BoundedCache<String, PublicKey>(entriesMax: PushAuthenticator.keysMax)
        /// When the held set was fetched; nil before the first success.
        var fetchedAt: Date?
        /// When the last fetch started, whatever its outcome.
        var lastAttemptAt: Date?
        var fetching = false
        /// Fetches finished so far; a waiter waits for this to move.
        var fetchesFinished = 0
        /// Why the last fetch failed; nil after a success.
        var lastFailure: String?

        func isUsable(now: Date, maxAgeSeconds: Double) -> Bool {
            guard let fetchedAt, keys.count > 0 else { return false }
            let age = now.timeIntervalSince(fetchedAt)
            // A clock stepped back by more than the age limit also ends the set.
            return age < maxAgeSeconds && age > -maxAgeSeconds
        }
    }

    public let configuration: Configuration
    /// Called after every key-set exchange, retries included, with its class
    /// and seconds.
    private let observe: @Sendable (StatusClass, Double) -> Void
    private let cache = Monitor(KeyCache())
    private let clock: any WorkClock

    public init(configuration: Configuration, clock: any WorkClock = SystemClock(),
                observe: @escaping @Sendable (StatusClass, Double) -> Void = { _, _ in }) {
        precondition(configuration.timeoutSeconds.isFinite && configuration.timeoutSeconds > 0,
                     "PushAuthenticator timeoutSeconds must be positive and finite")
        precondition(configuration.responseBytesMax > 0, "PushAuthenticator responseBytesMax must be positive")
        for value in [configuration.refreshIntervalMinSeconds, configuration.clockSkewSeconds,
                      configuration.retryWithoutKeysSeconds] {
            precondition(value.isFinite && value >= 0, "PushAuthenticator intervals must be finite and not negative")
        }
        precondition(configuration.keysMaxAgeSeconds.isFinite && configuration.keysMaxAgeSeconds > 0,
                     "PushAuthenticator keysMaxAgeSeconds must be positive and finite")
        precondition(!configuration.audience.isEmpty, "PushAuthenticator audience must not be empty")
        precondition(!configuration.serviceAccountEmail.isEmpty, "PushAuthenticator serviceAccountEmail must not be empty")
        self.configuration = configuration
        self.clock = clock
        self.observe = observe
    }

    /// Keys held now, usable or not.
    public var keyCount: Int { cache.withLock { $0.keys.count } }

    /// Verifies the `Authorization` header of a push request, at `now`
    /// (the clock's, unless given).
    public func verify(authorization: String?, now: Date? = nil) throws(PushAuthenticationError) -> PushClaims {
        let now = now ?? clock.date
        let deadline = ContinuousClock.now + .seconds(configuration.timeoutSeconds)
        let token = try PushToken(bearer: Self.bearerToken(authorization))
        let key = try key(for: token.keyID, now: now, deadline: deadline)
        guard key.verifyRS256(signature: token.signature, message: token.signingInput) else {
            throw PushAuthenticationError(.bad_signature, "the RS256 signature does not verify with the key its kid names")
        }
        return try checkClaims(token.claims, now: now)
    }

    /// The token of `Bearer <token>`. The scheme is case-insensitive
    /// (RFC 7235 §2.1); anything else is no token at all.
    static func bearerToken(_ authorization: String?) throws(PushAuthenticationError) -> Substring {
        guard let authorization, !authorization.isEmpty else {
            throw PushAuthenticationError(.missing_token, "no Authorization header")
        }
        let scheme = "bearer "
        guard authorization.utf8.count > scheme.utf8.count,
              authorization.prefix(scheme.count).lowercased() == scheme
        else {
            throw PushAuthenticationError(.missing_token, "the Authorization header is not a Bearer token")
        }
        let token = authorization.dropFirst(scheme.count).drop { $0 == " " }
        guard !token.isEmpty else {
            throw PushAuthenticationError(.missing_token, "the Authorization header is not a Bearer token")
        }
        return token
    }

    // MARK: - Claims

    private func checkClaims(_ claims: JSONValue, now: Date) throws(PushAuthenticationError) -> PushClaims {
        guard let issuer = claims["iss"]?.stringValue, Self.googleIssuers.contains(issuer) else {
            throw PushAuthenticationError(.wrong_issuer, "iss is not accounts.google.com")
        }
        // One audience, or an array of strings only.
        let audiences = claims["aud"]?.stringValue.map { [$0] } ?? claims["aud"]?.stringArrayValue ?? []
        guard audiences.contains(configuration.audience) else {
            throw PushAuthenticationError(.wrong_audience, "aud does not name the configured audience")
        }
        guard let email = claims["email"]?.stringValue, email == configuration.serviceAccountEmail else {
            throw PushAuthenticationError(.wrong_email, "email is not the configured push service account")
        }
        let emailVerified = switch claims["email_verified"] {
        case .bool(let verified): verified
        case .string(let text): text == "true"
        default: false
        }
        guard emailVerified else {
            throw PushAuthenticationError(.email_not_verified, "email_verified is not true")
        }
        let skew = configuration.clockSkewSeconds
        guard let expires = claims["exp"]?.doubleValue else {
            throw PushAuthenticationError(.expired, "exp is missing or not a number")
        }
        guard expires + skew > now.timeIntervalSince1970 else {
            throw PushAuthenticationError(.expired, "exp has passed")
        }
        var issuedAt: Date?
        if let iat = claims["iat"] {
            guard let seconds = iat.doubleValue else {
                throw PushAuthenticationError(.not_yet_valid, "iat is not a number")
            }
            guard seconds - skew <= now.timeIntervalSince1970 else {
                throw PushAuthenticationError(.not_yet_valid, "iat is in the future")
            }
            issuedAt = Date(timeIntervalSince1970: seconds)
        }
        let subject = claims["sub"]?.stringValue
        return PushClaims(email: email, audience: configuration.audience, issuer: issuer, subject: subject,
                          expiresAt: Date(timeIntervalSince1970: expires), issuedAt: issuedAt)
    }

    // MARK: - Keys

    private enum Plan {
        case use(PublicKey)
        case refuse(PushAuthenticationError)
        case fetch
        case wait(fetchesFinished: Int)
    }

    /// The key for `kid`, fetching or waiting for a fetch as the rules in the
    /// type's comment allow.
    private func key(for kid: String, now: Date, deadline: ContinuousClock.Instant)
        throws(PushAuthenticationError) -> PublicKey {
        let maxAge = configuration.keysMaxAgeSeconds
        let plan = cache.withLock { cache -> Plan in
            let usable = cache.isUsable(now: now, maxAgeSeconds: maxAge)
            if usable, let key = cache.keys.value(forKey: kid) { return .use(key) }
            if cache.fetching { return .wait(fetchesFinished: cache.fetchesFinished) }
            let interval = usable ? configuration.refreshIntervalMinSeconds : configuration.retryWithoutKeysSeconds
            if Self.mayFetch(lastAttemptAt: cache.lastAttemptAt, now: now, intervalSeconds: interval) {
                cache.fetching = true
                cache.lastAttemptAt = now
                return .fetch
            }
            return .refuse(usable
                ? PushAuthenticationError(.unknown_key, "no published key has this kid, and the keys were fetched too recently to ask again")
                : Self.keysUnavailable(cache.lastFailure))
        }
        switch plan {
        case .use(let key):
            return key
        case .refuse(let error):
            throw error
        case .fetch:
            let outcome = fetchKeys(deadline: deadline)
            let result = cache.withLock { cache in
                switch outcome {
                case .success(let keys):
                    cache.keys = keys
                    cache.fetchedAt = now
                    cache.lastFailure = nil
                case .failure(let detail):
                    cache.lastFailure = detail
                }
                cache.fetching = false
                cache.fetchesFinished += 1
                return Self.settle(cache, kid: kid, now: now, maxAgeSeconds: maxAge)
            }
            cache.broadcast()
            return try result.get()
        case .wait(let fetchesFinished):
            let result = cache.wait(until: deadline, for: { $0.fetchesFinished != fetchesFinished }) { cache, ready in
                if ready { return Self.settle(cache, kid: kid, now: now, maxAgeSeconds: maxAge) }
                if cache.isUsable(now: now, maxAgeSeconds: maxAge), let key = cache.keys.value(forKey: kid) {
                    return .success(key)
                }
                return .failure(PushAuthenticationError(
                    .keys_unavailable, "the key fetch in progress did not finish within the time limit"))
            }
            return try result.get()
        }
    }

    /// The outcome for `kid` once a fetch has finished; no further fetch.
    private static func settle(_ cache: KeyCache, kid: String, now: Date, maxAgeSeconds: Double)
        -> Result<PublicKey, PushAuthenticationError> {
        guard cache.isUsable(now: now, maxAgeSeconds: maxAgeSeconds) else {
            return .failure(keysUnavailable(cache.lastFailure))
        }
        guard let key = cache.keys.value(forKey: kid) else {
            return .failure(PushAuthenticationError(.unknown_key, "no published key has this kid, even after a refresh"))
        }
        return .success(key)
    }

    private static func keysUnavailable(_ lastFailure: String?) -> PushAuthenticationError {
        PushAuthenticationError(.keys_unavailable, "Google's keys could not be fetched: \(lastFailure ?? "no usable key set")")
    }

    /// Whether a fetch may start at `now`. A `now` slightly before the last
    /// attempt (callers read the clock before taking the lock) counts as no
    /// time passed; a clock stepped back by more than the interval re-arms.
    static func mayFetch(lastAttemptAt: Date?, now: Date, intervalSeconds: Double) -> Bool {
        guard let lastAttemptAt else { return true }
        let elapsed = now.timeIntervalSince(lastAttemptAt)
        return elapsed >= intervalSeconds || elapsed < -intervalSeconds
    }

    private enum FetchOutcome {
        case success(BoundedCache<String, PublicKey>)
        case failure(String)
    }

    private func fetchKeys(deadline: ContinuousClock.Instant) -> FetchOutcome {
        let url = configuration.jwksURL
        let answer = RetryingCall.send(
            name: "JWKS fetch", responseBytesMax: configuration.responseBytesMax, deadline: deadline,
            clock: clock, observe: observe
        ) {
            var request = URLRequest(url: url)
            request.httpMethod = "GET"
            request.setValue("application/json", forHTTPHeaderField: "Accept")
            return request
        }
        switch answer {
        case .unavailable(let detail):
            return .failure(detail)
        case .final(let status, let body):
            guard (200..<300).contains(status) else { return .failure("JWKS fetch: HTTP status \(status)") }
            return Self.parseKeySet(body)
        }
    }

    /// The usable keys of a JWKS (RFC 7517 §5): RSA keys for RS256 signing
    /// with a `kid`, at most `keysMax`, the first of a repeated `kid` kept.
    /// Other keys are skipped; a set with none usable is a failure, so the
    /// keys held before stay.
    private static func parseKeySet(_ body: Data) -> FetchOutcome {
        let set: JSONWebKeySet
        do {
            // RFC 7517's key set, as Google serves it, onto a `Decodable`
            // type: Foundation's decoder, as for Google's other resources.
            set = try JSONDecoder().decode(JSONWebKeySet.self, from: body)
        } catch {
            return .failure("JWKS fetch: the answer is not a JSON Web Key Set")
        }
        var keys: [String: PublicKey] = [:]
        for entry in set.keys where keys.count < keysMax {
            guard entry.kty == "RSA", entry.alg == nil || entry.alg == "RS256", entry.use == nil || entry.use == "sig",
                  let kid = entry.kid, !kid.isEmpty, kid.count <= keyIDCharactersMax, keys[kid] == nil,
                  let n = entry.n.flatMap(Base64URL.decode), let e = entry.e.flatMap(Base64URL.decode),
                  let key = try? PublicKey.rsa(modulus: n, exponent: e)
            else { continue }
            keys[kid] = key
        }
        guard !keys.isEmpty else { return .failure("JWKS fetch: the key set holds no usable RS256 key") }
        let cache = BoundedCache<String, PublicKey>(entriesMax: keysMax)
        for (kid, key) in keys { cache.insert(key, forKey: kid) }
        return .success(cache)
    }
}

/// A JSON Web Key Set; every member but `keys` is ignored.
private struct JSONWebKeySet: Decodable {
    struct Key: Decodable {
        let kty: String?
        let alg: String?
        let use: String?
        let kid: String?
        let n: String?
        let e: String?
    }

    let keys: [Key]
}

/// A push token parsed but not yet verified. Everything here is
/// attacker-controlled until the signature has been checked.
private struct PushToken {
    /// The ASCII bytes `header.payload` that the signature covers.
    let signingInput: ArraySlice<UInt8>
    let keyID: String
    /// A JSON object.
    let claims: JSONValue
    let signature: [UInt8]

    init(bearer token: Substring) throws(PushAuthenticationError) {
        let bytes = Array(token.utf8)
        guard bytes.count <= PushAuthenticator.tokenBytesMax else {
            throw PushAuthenticationError(.malformed, "token is longer than \(PushAuthenticator.tokenBytesMax) bytes")
        }
        let segments: JWSSegments
        do {
            segments = try JWSSegments(bytes)
        } catch {
            throw PushAuthenticationError(.malformed, error.description)
        }
        guard let headerFields = Self.object(segments.header) else {
            throw PushAuthenticationError(.malformed, "header is not a JSON object")
        }
        guard let claims = Self.object(segments.payload) else {
            throw PushAuthenticationError(.malformed, "payload is not a JSON object")
        }
        guard headerFields["alg"]?.stringValue == "RS256" else {
            throw PushAuthenticationError(.wrong_algorithm, "header alg is not RS256")
        }
        // RFC 7515 §4.1.11: extensions marked critical must be understood; we understand none.
        guard headerFields["crit"] == nil else {
            throw PushAuthenticationError(.malformed, "header lists critical extensions (crit)")
        }
        guard let keyID = headerFields["kid"]?.stringValue, !keyID.isEmpty else {
            throw PushAuthenticationError(.malformed, "header has no string kid")
        }
        self.signingInput = segments.signingInput
        self.keyID = keyID
        self.claims = claims
        self.signature = segments.signature
    }

    /// The strict parser's reading of a segment, when it is a JSON object.
    /// Its values keep their JSON types apart: a number is never a Boolean.
    private static func object(_ json: [UInt8]) -> JSONValue? {
        guard let value = try? JSONParser.parse(json), value.objectMembers != nil else { return nil }
        return value
    }
}
