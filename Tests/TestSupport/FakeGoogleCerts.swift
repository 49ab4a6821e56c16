public import Crypto
public import Foundation
import HTTPServer
import Locking
import Logging

/// A stand-in for Google's OAuth 2 certificate endpoint on a real loopback
/// socket, served by the product's own HTTP server: a JWKS at
/// `/oauth2/v3/certs`, in the form Google publishes.
///
/// It holds the signing keys it publishes, makes Pub/Sub push tokens (good
/// ones, and ones that break one rule each), counts fetches, and can be
/// told to answer with a failing status or slowly.
public final class FakeGoogleCerts: Sendable {
    public static let path = "/oauth2/v3/certs"
    public static let defaultAudience = "https://wallet.example.com/google-play/notifications"
    public static let defaultEmail = "pubsub-push@wallet-project.iam.gserviceaccount.com"

    /// A published key and its `kid`.
    public struct SigningKey: Sendable {
        public var kid: String
        public var key: RSAPrivateKey
    }

    private struct State: Sendable {
        /// Published, oldest first; the last signs by default.
        var published: [SigningKey]
        var fetchCount = 0
        /// When set, every fetch gets this status and no keys.
        var failureStatus: Int?
        var answerDelaySeconds = 0.0
        var nextKeyNumber = 1
    }

    /// Signs tokens whose `kid` is not published; never in the JWKS.
    public let strayKey: RSAPrivateKey
    private let state: Locked<State>
    private let server: Server

    /// Keys every instance starts with: generating a 2048-bit key takes up
    /// to a few hundred milliseconds, and each instance has its own server,
    /// so sharing them across instances changes nothing a test can see.
    /// The last one is the stray key.
    private static let startingKeys = (0..<4).map { _ in RSAPrivateKey() }

    /// Starts serving with `keyCount` keys, `kid`s `fake-key-1`, …; the
    /// first three are shared with other instances, the rest fresh.
    public init(keyCount: Int = 1) throws {
        precondition(keyCount >= 0)
        var initial = State(published: [])
        for index in 0..<keyCount {
            let key = index < Self.startingKeys.count - 1 ? Self.startingKeys[index] : RSAPrivateKey()
            initial.published.append(SigningKey(kid: "fake-key-\(initial.nextKeyNumber)", key: key))
            initial.nextKeyNumber += 1
        }
        state = Locked(initial)
        strayKey = Self.startingKeys[Self.startingKeys.count - 1]
        let router = Router()
        server = Server(
            configuration: .init(host: "127.0.0.1", port: 0, threads: 4, maxBodyBytes: 1 << 16, maxHeaderBytes: 16 << 10,
                                 maxConnections: 64, idleTimeoutSeconds: 30, requestTimeoutSeconds: 30,
                                 shutdownGraceSeconds: 1),
            router: router, logger: Logger(label: "fake-google-certs", level: .error))
        router.add("GET", Self.path, sync: { [self] _ in answer() })
        try server.start()
    }

    public func stop() {
        server.shutdown()
    }

    public var url: URL { URL(string: "http://127.0.0.1:\(server.port)\(Self.path)")! }

    /// Requests received so far, answered or failed.
    public var fetchCount: Int { state.withLock { $0.fetchCount } }

    public var published: [SigningKey] { state.withLock { $0.published } }

    /// The key that signs when a token names no `kid`: the newest published.
    public var currentKey: SigningKey {
        state.withLock { state in
            guard let last = state.published.last else { preconditionFailure("FakeGoogleCerts publishes no key") }
            return last
        }
    }

    // MARK: Scripting

    /// Publishes a fresh key, or `key`, under a new `kid` (or `kid`), and
    /// returns the `kid`. New tokens are signed with it.
    @discardableResult
    public func addKey(kid: String? = nil, key: RSAPrivateKey? = nil) -> String {
        let key = key ?? RSAPrivateKey()
        return state.withLock { state in
            let kid = kid ?? "fake-key-\(state.nextKeyNumber)"
            state.nextKeyNumber += 1
            state.published.append(SigningKey(kid: kid, key: key))
            return kid
        }
    }

    /// Publishes a fresh key and withdraws the oldest; returns the new `kid`.
    @discardableResult
    public func rotate() -> String {
        let kid = addKey()
        state.withLock { state in
            if state.published.count > 1 { state.published.removeFirst() }
        }
        return kid
    }

    /// Every fetch from now on answers `status` with no keys; nil serves again.
    public func fail(status: Int?) {
        state.withLock { $0.failureStatus = status }
    }

    /// Every answer from now on waits this long first, so fetches overlap
    /// with the callers that wait for them.
    public func delayAnswers(seconds: Double) {
        state.withLock { $0.answerDelaySeconds = seconds }
    }

    // MARK: Tokens

    /// A Pub/Sub push token: an RS256 OIDC ID token with Google's claims.
    /// `kid` defaults to the current key's; `signWith` defaults to the
    /// published key of that `kid`, or `strayKey` when none is published.
    public func token(audience: String = FakeGoogleCerts.defaultAudience, email: String = FakeGoogleCerts.defaultEmail,
                      emailVerified: Bool = true, issuer: String = "https://accounts.google.com",
                      expiresIn: Double = 3_600, issuedAt: Date = Date(), kid: String? = nil,
                      signWith: RSAPrivateKey? = nil) -> String {
        let issued = issuedAt.timeIntervalSince1970.rounded(.down)
        let claims: [String: Any] = [
            "aud": audience,
            "azp": "110000000000000000000",
            "email": email,
            "email_verified": emailVerified,
            "exp": Int64(issued + expiresIn),
            "iat": Int64(issued),
            "iss": issuer,
            "sub": "110000000000000000000",
        ]
        return token(kid: kid, claims: claims, signWith: signWith)
    }

    /// A token with these claims, header `{"alg":"RS256","kid":…,"typ":"JWT"}`.
    public func token(kid: String? = nil, claims: [String: Any], signWith: RSAPrivateKey? = nil) -> String {
        let kid = kid ?? currentKey.kid
        let key = signWith ?? published.first { $0.kid == kid }?.key ?? strayKey
        return Self.token(header: ["alg": "RS256", "kid": kid, "typ": "JWT"], claims: claims, signWith: key)
    }

    /// A token with exactly this header and these claims, signed RS256 by `key`.
    public static func token(header: [String: Any], claims: [String: Any], signWith key: RSAPrivateKey) -> String {
        let signingInput = Base64URL.encode(json(header)) + "." + Base64URL.encode(json(claims))
        guard let signature = try? key.signRS256(Array(signingInput.utf8)) else {
            preconditionFailure("RS256 signing failed")
        }
        return signingInput + "." + Base64URL.encode(signature)
    }

    private static func json(_ object: [String: Any]) -> [UInt8] {
        guard let data = try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys]) else {
            preconditionFailure("not JSON-serializable")
        }
        return Array(data)
    }

    // MARK: Answers

    private func answer() -> Response {
        let (keys, failureStatus, delaySeconds) = state.withLock { state in
            state.fetchCount += 1
            return (state.published, state.failureStatus, state.answerDelaySeconds)
        }
        // Latency on purpose, so concurrent callers overlap with the fetch: a
        // slow Google is the behaviour under test.
        if delaySeconds > 0 { Thread.sleep(forTimeInterval: delaySeconds) }
        if let failureStatus {
            return Response(status: failureStatus, headers: [("Content-Type", "application/json")],
                            body: Array(#"{"error":"fake failure"}"#.utf8))
        }
        let entries: [[String: Any]] = keys.compactMap { signing in
            guard let (modulus, exponent) = signing.key.publicKey.rsaComponents else { return nil }
            return ["kty": "RSA", "alg": "RS256", "use": "sig", "kid": signing.kid,
                    "n": Base64URL.encode(modulus), "e": Base64URL.encode(exponent)]
        }
        return Response(status: 200, headers: [("Content-Type", "application/json; charset=UTF-8"),
                                               ("Cache-Control", "public, max-age=21600, must-revalidate, no-transform")],
                        body: Self.json(["keys": entries]))
    }
}
