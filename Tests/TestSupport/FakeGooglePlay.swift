import Crypto
public import Foundation
public import GooglePlay
import HTTPServer
import Locking
import Logging

/// A stand-in for Google's OAuth token endpoint, the Google Play Developer
/// API's one-time product calls and Pub/Sub's `projects.subscriptions.get`,
/// on a real loopback socket, served by the product's own HTTP server.
///
/// It owns a service account (a fresh RSA key) whose `token_uri` is its own
/// `/token`, and checks what Google documents:
///
/// - `POST /token` takes a form with `grant_type`
///   `urn:ietf:params:oauth:grant-type:jwt-bearer` and an `assertion`: a JWT
///   whose header says RS256 (and, when it names a `kid`, the account's key
///   id), signed by the account's key, with `iss` the account's e-mail,
///   `scope` the Android Publisher scope, Pub/Sub's, or both, `aud` the
///   `token_uri`, an `iat` not in the future (60 s of skew allowed), and an
///   `exp` later than now and at most an hour after `iat`. Anything else is
///   400 with an OAuth error (`invalid_grant`), as Google answers.
/// - The API under `/androidpublisher/v3/applications/{package}/` takes only
///   `Authorization: Bearer` with a token it issued that has not expired
///   (else 401 in Google's error shape) and holds the Android Publisher
///   scope (else 403), and only its package (else 404).
/// - `GET /v1/projects/{project}/subscriptions/{subscription}` checks its
///   bearer token the same way, for the Pub/Sub scope, and answers the
///   subscription the test set, or 404, in Pub/Sub's error shape.
///
/// Tests load it with purchases and voided purchases, and can make the next
/// requests fail with a status of their choice. A scripted failure is
/// answered before any check, as an outage in front of Google would be.
public final class FakeGooglePlay: Sendable {
    public static let clientEmail = "wallet@test-project.iam.gserviceaccount.com"
    public static let projectID = "test-project"

    /// A product purchase as the test sets it; rendered the way Google
    /// writes one (int64 fields as strings, absent fields left out).
    public struct Purchase: Sendable {
        public var purchaseState: Int
        public var consumptionState = 0
        public var purchaseType: Int?
        public var orderId: String?
        public var quantity: Int?
        public var obfuscatedExternalAccountId: String?
        public var purchaseTimeMillis: Int64 = 1_760_000_000_000
        public var acknowledgementState = 0
        public var regionCode = "US"
        public var refundableQuantity: Int?

        public init(purchaseState: Int, purchaseType: Int? = nil, orderId: String? = nil, quantity: Int? = nil,
                    obfuscatedExternalAccountId: String? = nil) {
            self.purchaseState = purchaseState
            self.purchaseType = purchaseType
            self.orderId = orderId
            self.quantity = quantity
            self.obfuscatedExternalAccountId = obfuscatedExternalAccountId
        }

        public static let defaultOrderID = "GPA.3301-2345-6789-01234"

        /// Paid through the normal billing flow.
        public static func purchased(orderId: String? = defaultOrderID, quantity: Int? = nil,
                                     accountID: String? = nil) -> Purchase {
            Purchase(purchaseState: 0, orderId: orderId, quantity: quantity, obfuscatedExternalAccountId: accountID)
        }

        /// Waiting for payment (cash, bank transfer).
        public static func pending(orderId: String? = defaultOrderID, quantity: Int? = nil,
                                   accountID: String? = nil) -> Purchase {
            Purchase(purchaseState: 2, orderId: orderId, quantity: quantity, obfuscatedExternalAccountId: accountID)
        }

        public static func canceled(orderId: String? = defaultOrderID, quantity: Int? = nil,
                                    accountID: String? = nil) -> Purchase {
            Purchase(purchaseState: 1, orderId: orderId, quantity: quantity, obfuscatedExternalAccountId: accountID)
        }

        /// A license tester's purchase.
        public static func test(orderId: String? = defaultOrderID, quantity: Int? = nil,
                                accountID: String? = nil) -> Purchase {
            Purchase(purchaseState: 0, purchaseType: 0, orderId: orderId, quantity: quantity,
                     obfuscatedExternalAccountId: accountID)
        }

        /// Redeemed with a promo code: Google gives no order id.
        public static func promo(orderId: String? = nil, quantity: Int? = nil, accountID: String? = nil) -> Purchase {
            Purchase(purchaseState: 0, purchaseType: 1, orderId: orderId, quantity: quantity,
                     obfuscatedExternalAccountId: accountID)
        }

        /// Earned by watching an ad.
        public static func rewarded(orderId: String? = defaultOrderID, quantity: Int? = nil,
                                    accountID: String? = nil) -> Purchase {
            Purchase(purchaseState: 0, purchaseType: 2, orderId: orderId, quantity: quantity,
                     obfuscatedExternalAccountId: accountID)
        }

        func json(productID: String) -> [String: Any] {
            var object: [String: Any] = [
                "kind": "androidpublisher#productPurchase", "purchaseTimeMillis": String(purchaseTimeMillis),
                "purchaseState": purchaseState, "consumptionState": consumptionState,
                "acknowledgementState": acknowledgementState, "regionCode": regionCode, "productId": productID,
            ]
            if let purchaseType { object["purchaseType"] = purchaseType }
            if let orderId { object["orderId"] = orderId }
            if let quantity { object["quantity"] = quantity }
            if let obfuscatedExternalAccountId { object["obfuscatedExternalAccountId"] = obfuscatedExternalAccountId }
            if let refundableQuantity { object["refundableQuantity"] = refundableQuantity }
            return object
        }
    }

    /// A voided purchase as the test sets it, rendered as Google's
    /// `VoidedPurchase` resource: exactly its eight members (`kind`,
    /// `purchaseToken`, `purchaseTimeMillis`, `voidedTimeMillis`, `orderId`,
    /// `voidedSource`, `voidedReason`, `voidedQuantity`), int64 members as
    /// strings, absent ones left out
    /// (https://developers.google.com/android-publisher/api-ref/rest/v3/purchases.voidedpurchases).
    /// There is no refund type: an entry with `voidedQuantity` is a
    /// quantity-based partial refund, listed only when the request sets
    /// `includeQuantityBasedPartialRefund=true`; one without voids the whole
    /// purchase.
    public struct Voided: Sendable {
        public var purchaseToken: String
        public var orderId: String?
        public var purchaseTimeMillis: Int64
        public var voidedTimeMillis: Int64
        public var voidedSource: Int
        public var voidedReason: Int
        /// Set for a quantity-based partial refund: how many units it voided.
        public var voidedQuantity: Int?
        /// Listed only with `type=1`. Not a member of the resource.
        public var isSubscription: Bool

        public init(purchaseToken: String, orderId: String?, voidedTimeMillis: Int64, voidedQuantity: Int? = nil,
                    voidedSource: Int = 0, voidedReason: Int = 1, isSubscription: Bool = false) {
            self.purchaseToken = purchaseToken
            self.orderId = orderId
            self.purchaseTimeMillis = voidedTimeMillis - 86_400_000
            self.voidedTimeMillis = voidedTimeMillis
            self.voidedSource = voidedSource
            self.voidedReason = voidedReason
            self.voidedQuantity = voidedQuantity
            self.isSubscription = isSubscription
        }

        /// The documented members, and only those.
        static let members: Set<String> = [
            "kind", "purchaseToken", "purchaseTimeMillis", "voidedTimeMillis", "orderId", "voidedSource", "voidedReason",
            "voidedQuantity",
        ]

        var json: [String: Any] {
            var object: [String: Any] = [
                "kind": "androidpublisher#voidedPurchase", "purchaseToken": purchaseToken,
                "purchaseTimeMillis": String(purchaseTimeMillis), "voidedTimeMillis": String(voidedTimeMillis),
                "voidedSource": voidedSource, "voidedReason": voidedReason,
            ]
            if let orderId { object["orderId"] = orderId }
            if let voidedQuantity { object["voidedQuantity"] = voidedQuantity }
            precondition(Set(object.keys).isSubset(of: Self.members), "a voided purchase member Google does not document")
            return object
        }
    }

    /// One request as received.
    public struct Received: Sendable {
        public var method: String
        /// Such as `/token` or `/androidpublisher/v3/applications/…/tokens/t1`.
        public var path: String
        public var query: [String: String]
        /// For `/token`: whether the assertion passed every check; for the
        /// API: whether the bearer token did.
        public var authorized: Bool
        /// Why not, when not.
        public var tokenProblem: String?
    }

    /// A scripted answer for the next matching requests.
    public struct Failure: Sendable {
        public var status: Int
        public var retryAfter: String?
        public var body: String
        /// Only requests whose path contains this; nil matches every request,
        /// the token endpoint's too.
        public var pathContaining: String?

        public init(status: Int, retryAfter: String? = nil, body: String = "", pathContaining: String? = nil) {
            self.status = status
            self.retryAfter = retryAfter
            self.body = body
            self.pathContaining = pathContaining
        }

        /// A failure with Google's API error body, naming `reason`.
        public static func google(_ status: Int, reason: String, retryAfter: String? = nil,
                                  pathContaining: String? = nil) -> Failure {
            Failure(status: status, retryAfter: retryAfter,
                    body: String(decoding: FakeGooglePlay.errorBody(status, reason: reason, message: "scripted"),
                                 as: UTF8.self),
                    pathContaining: pathContaining)
        }
    }

    /// A Pub/Sub subscription as the test sets it, rendered as the
    /// members of Pub/Sub's `Subscription` resource that say where and how
    /// pushes go: `name`, `topic`, and `pushConfig` with `pushEndpoint` and
    /// `oidcToken` (`serviceAccountEmail`, `audience`); absent ones left out.
    /// https://cloud.google.com/pubsub/docs/reference/rest/v1/projects.subscriptions
    /// (the resource; `projects.subscriptions.get` answers it whole:
    /// https://cloud.google.com/pubsub/docs/reference/rest/v1/projects.subscriptions/get).
    public struct Subscription: Sendable {
        /// `projects/{project}/subscriptions/{subscription}`.
        public var name: String
        public var topic: String
        /// nil: a pull subscription, with an empty `pushConfig`.
        public var pushEndpoint: String?
        /// Both nil: pushes without authentication (no `oidcToken`).
        public var serviceAccountEmail: String?
        /// nil: Google uses the push endpoint as the audience.
        public var audience: String?

        public init(name: String, topic: String = "projects/\(FakeGooglePlay.projectID)/topics/play-rtdn",
                    pushEndpoint: String?, serviceAccountEmail: String?, audience: String?) {
            self.name = name
            self.topic = topic
            self.pushEndpoint = pushEndpoint
            self.serviceAccountEmail = serviceAccountEmail
            self.audience = audience
        }

        static let members: Set<String> = ["name", "topic", "pushConfig"]
        static let pushConfigMembers: Set<String> = ["pushEndpoint", "oidcToken"]
        static let oidcTokenMembers: Set<String> = ["serviceAccountEmail", "audience"]

        var json: [String: Any] {
            var pushConfig: [String: Any] = [:]
            if let pushEndpoint { pushConfig["pushEndpoint"] = pushEndpoint }
            if serviceAccountEmail != nil || audience != nil {
                var token: [String: Any] = [:]
                if let serviceAccountEmail { token["serviceAccountEmail"] = serviceAccountEmail }
                if let audience { token["audience"] = audience }
                precondition(Set(token.keys).isSubset(of: Self.oidcTokenMembers))
                pushConfig["oidcToken"] = token
            }
            precondition(Set(pushConfig.keys).isSubset(of: Self.pushConfigMembers))
            let object: [String: Any] = ["name": name, "topic": topic, "pushConfig": pushConfig]
            precondition(Set(object.keys).isSubset(of: Self.members), "a subscription member Pub/Sub does not document")
            return object
        }
    }

    public let packageName: String
    public let account: ServiceAccount
    public let privateKeyID: String
    private let key: RSAPrivateKey
    private let core: Core
    private let server: Server

    public init(packageName: String = "com.example.coins") throws {
        self.packageName = packageName
        let key = RSAPrivateKey()
        let privateKeyID = hexString(SecureRandom.bytes(count: 20))
        self.key = key
        self.privateKeyID = privateKeyID
        let core = Core(packageName: packageName, publicKey: key.publicKey, privateKeyID: privateKeyID)
        self.core = core
        let router = Router()
        server = Server(
            configuration: .init(host: "127.0.0.1", port: 0, threads: 4, maxBodyBytes: 64 << 10, maxHeaderBytes: 16 << 10,
                                 maxConnections: 64, idleTimeoutSeconds: 30, requestTimeoutSeconds: 30,
                                 shutdownGraceSeconds: 1),
            router: router, logger: Logger(label: "fake-google-play", level: .error))
        let products = "/androidpublisher/v3/applications/{package}/purchases/products/{productId}/tokens/{token}"
        router.add("POST", "/token", sync: { core.grant($0) })
        router.add("GET", products, sync: { core.api($0) })
        // `…/tokens/{token}:consume` is one path segment: the suffix is read
        // off the token parameter.
        router.add("POST", products, sync: { core.api($0) })
        router.add("GET", "/androidpublisher/v3/applications/{package}/purchases/voidedpurchases",
                   sync: { core.api($0) })
        router.add("GET", "/v1/projects/{project}/subscriptions/{subscription}", sync: { core.subscription($0) })
        try server.start()
        let tokenURI = "http://127.0.0.1:\(server.port)/token"
        core.setTokenURI(tokenURI)
        account = ServiceAccount(clientEmail: Self.clientEmail, privateKey: key, tokenURI: URL(string: tokenURI)!,
                                 privateKeyID: privateKeyID)
    }

    public func stop() {
        server.shutdown()
    }

    public var apiURL: URL { URL(string: "http://127.0.0.1:\(server.port)")! }

    /// Pub/Sub's base URL: the same server.
    public var pubSubURL: URL { apiURL }

    /// A client configuration for this fake's package and address.
    public func configuration(timeoutSeconds: Double = 5) -> PlayClient.Configuration {
        PlayClient.Configuration(packageName: packageName, apiURL: apiURL, timeoutSeconds: timeoutSeconds)
    }

    /// The account's key file, the way the Cloud console issues it.
    public func serviceAccountJSON() -> String {
        let object: [String: Any] = [
            "type": "service_account", "project_id": Self.projectID, "private_key_id": privateKeyID,
            "private_key": key.pkcs8PEM, "client_email": Self.clientEmail, "client_id": "104857600000000000001",
            "auth_uri": "https://accounts.google.com/o/oauth2/auth", "token_uri": account.tokenURI.absoluteString,
            "auth_provider_x509_cert_url": "https://www.googleapis.com/oauth2/v1/certs",
            "client_x509_cert_url": "https://www.googleapis.com/robot/v1/metadata/x509/"
                + "wallet%40test-project.iam.gserviceaccount.com",
            "universe_domain": "googleapis.com",
        ]
        let data = (try? JSONSerialization.data(withJSONObject: object,
                                                options: [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes])) ?? Data()
        return String(decoding: data, as: UTF8.self)
    }

    // MARK: Scripting

    /// How long the access tokens issued from now on live, in seconds.
    public var accessTokenSeconds: Int {
        get { core.state.withLock { $0.accessTokenSeconds } }
        set { core.state.withLock { $0.accessTokenSeconds = newValue } }
    }

    /// Voided purchases per page, at most; small, so tests cross pages.
    public var voidedPageSize: Int {
        get { core.state.withLock { $0.voidedPageSize } }
        set {
            precondition(newValue > 0)
            core.state.withLock { $0.voidedPageSize = newValue }
        }
    }

    /// `GET …/products/{productID}/tokens/{token}` answers `purchase`.
    public func setPurchase(productID: String, token: String, _ purchase: Purchase) {
        core.state.withLock { $0.purchases[Core.key(productID, token)] = .purchase(purchase) }
    }

    /// `GET …/products/{productID}/tokens/{token}` answers `json` verbatim.
    public func setPurchaseJSON(productID: String, token: String, _ json: String) {
        core.state.withLock { $0.purchases[Core.key(productID, token)] = .raw(json) }
    }

    /// The purchase is gone: 410, as for a token Google no longer keeps.
    public func setGone(productID: String, token: String) {
        core.state.withLock { $0.purchases[Core.key(productID, token)] = .gone }
    }

    /// The purchase as it stands now (consumption included), if set with a `Purchase`.
    public func purchase(productID: String, token: String) -> Purchase? {
        core.state.withLock { state in
            if case .purchase(let purchase)? = state.purchases[Core.key(productID, token)] { return purchase }
            return nil
        }
    }

    /// `projects.subscriptions.get` answers `subscription` under its name.
    public func setSubscription(_ subscription: Subscription) {
        core.state.withLock { $0.subscriptions[subscription.name] = subscription }
    }

    /// The voided-purchases list holds `voided`.
    public func addVoided(_ voided: Voided) {
        core.state.withLock { $0.voided.append(voided) }
    }

    /// Forgets every access token issued, as a revocation would: the next
    /// API request with one gets 401.
    public func revokeAccessTokens() {
        core.state.withLock { $0.issued.removeAll() }
    }

    /// The next `count` matching requests get `failure` instead of an answer.
    public func fail(_ failure: Failure, count: Int) {
        core.state.withLock { $0.failures += Array(repeating: failure, count: count) }
    }

    /// Drops every scripted failure not used yet.
    public func clearFailures() {
        core.state.withLock { $0.failures.removeAll() }
    }

    // MARK: Observing

    public var received: [Received] {
        core.state.withLock { $0.received }
    }

    public func received(pathContaining text: String) -> [Received] {
        received.filter { $0.path.contains(text) }
    }

    /// Access tokens issued.
    public var tokenGrants: Int {
        core.state.withLock { $0.tokenGrants }
    }

    /// Token endpoint requests, granted or not.
    public var tokenRequests: Int {
        received.filter { $0.path == "/token" }.count
    }

    /// `(productID, token)` of every successful consume, in order.
    public var consumed: [(productID: String, token: String)] {
        core.state.withLock { $0.consumed }
    }

    // MARK: Google's bodies

    /// Google's API error body: `{"error":{"code","message","errors":[{"reason"}],"status"}}`.
    public static func errorBody(_ status: Int, reason: String, message: String) -> [UInt8] {
        let statusName = switch status {
        case 400: "INVALID_ARGUMENT"
        case 401: "UNAUTHENTICATED"
        case 403: "PERMISSION_DENIED"
        case 404: "NOT_FOUND"
        case 410: "NOT_FOUND"
        case 429: "RESOURCE_EXHAUSTED"
        case 503: "UNAVAILABLE"
        default: status >= 500 ? "INTERNAL" : "FAILED_PRECONDITION"
        }
        return Core.jsonBytes([
            "error": [
                "code": status, "message": message, "status": statusName,
                "errors": [["message": message, "domain": "global", "reason": reason]],
            ] as [String: Any],
        ])
    }
}

/// The fake's state and answers. A class of its own so that the routes,
/// added before the server starts, need nothing that exists only after it
/// has (the port, hence the account's `token_uri`).
private final class Core: Sendable {
    enum Stored: Sendable {
        case purchase(FakeGooglePlay.Purchase)
        case raw(String)
        case gone
    }

    /// A voided-purchases query, kept behind its page token.
    struct Cursor: Sendable {
        var startMilliseconds: Int64
        var endMilliseconds: Int64
        var includeSubscriptions: Bool
        var includePartialRefunds: Bool
        var maxResults: Int
        var offset: Int
    }

    struct State: Sendable {
        var tokenURI = ""
        var accessTokenSeconds = 3_600
        var voidedPageSize = 2
        /// Access token -> when it expires, and the scopes it was granted.
        var issued: [String: (expires: Date, scopes: Set<String>)] = [:]
        var tokenGrants = 0
        var purchases: [String: Stored] = [:]
        var consumed: [(productID: String, token: String)] = []
        var voided: [FakeGooglePlay.Voided] = []
        var subscriptions: [String: FakeGooglePlay.Subscription] = [:]
        var pages: [String: Cursor] = [:]
        var failures: [FakeGooglePlay.Failure] = []
        var received: [FakeGooglePlay.Received] = []
    }

    static let skewSeconds: Int64 = 60
    static let pubSubScope = "https://www.googleapis.com/auth/pubsub"
    /// The scopes a grant may ask for here.
    static let grantableScopes: Set<String> = [GooglePlay.androidPublisherScope, pubSubScope]
    static let voidedWindowMilliseconds: Int64 = 30 * 86_400_000

    let packageName: String
    let publicKey: PublicKey
    let privateKeyID: String
    let state = Locked(State())

    init(packageName: String, publicKey: PublicKey, privateKeyID: String) {
        self.packageName = packageName
        self.publicKey = publicKey
        self.privateKeyID = privateKeyID
    }

    func setTokenURI(_ uri: String) {
        state.withLock { $0.tokenURI = uri }
    }

    static func key(_ productID: String, _ token: String) -> String {
        productID + "\n" + token
    }

    // MARK: The token endpoint

    func grant(_ request: Request) -> Response {
        let form = Forms.fields(request.body) ?? [:]
        let formProblem: (error: String, detail: String)?
        if !(request.headers["content-type"] ?? "").lowercased().hasPrefix("application/x-www-form-urlencoded") {
            formProblem = ("invalid_request", "Content-Type must be application/x-www-form-urlencoded")
        } else if form["grant_type"] != AccessTokens.grantType {
            formProblem = ("unsupported_grant_type", "Invalid grant_type: \(form["grant_type"] ?? "")")
        } else {
            formProblem = nil
        }
        let checked = checkAssertion(form["assertion"])
        let assertionProblem = formProblem == nil ? checked.problem : formProblem?.detail
        let failure = record(request, problem: assertionProblem)
        if let failure { return Self.answer(failure) }
        if let formProblem { return Self.oauthError(formProblem.error, formProblem.detail) }
        if let assertionProblem { return Self.oauthError("invalid_grant", "Invalid JWT: \(assertionProblem)") }

        let token = "ya29.fake-" + Base64URL.encode(SecureRandom.bytes(count: 32))
        let lifetime = state.withLock { state -> Int in
            state.issued[token] = (Date().addingTimeInterval(Double(state.accessTokenSeconds)), checked.scopes)
            state.tokenGrants += 1
            return state.accessTokenSeconds
        }
        return Self.json(["access_token": token, "expires_in": lifetime, "token_type": "Bearer"])
    }

    /// The scopes asked for, and nil when the assertion passes; else why not.
    private func checkAssertion(_ assertion: String?) -> (scopes: Set<String>, problem: String?) {
        let scopes = Self.scopes(assertion)
        return (scopes, assertionProblem(assertion, scopes: scopes))
    }

    private static func scopes(_ assertion: String?) -> Set<String> {
        let parts = assertion?.split(separator: ".", omittingEmptySubsequences: false) ?? []
        guard parts.count == 3, let claimsBytes = Base64URL.decode(String(parts[1])),
              let claims = (try? JSONSerialization.jsonObject(with: Data(claimsBytes))) as? [String: Any]
        else { return [] }
        return Set((claims["scope"] as? String)?.split(separator: " ").map(String.init) ?? [])
    }

    private func assertionProblem(_ assertion: String?, scopes: Set<String>) -> String? {
        guard let assertion else { return "no assertion" }
        let parts = assertion.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3, let headerBytes = Base64URL.decode(String(parts[0])),
              let claimsBytes = Base64URL.decode(String(parts[1])), let signature = Base64URL.decode(String(parts[2])),
              let header = (try? JSONSerialization.jsonObject(with: Data(headerBytes))) as? [String: Any],
              let claims = (try? JSONSerialization.jsonObject(with: Data(claimsBytes))) as? [String: Any]
        else { return "not a JWT" }
        guard header["alg"] as? String == "RS256" else { return "alg" }
        if let kid = header["kid"] {
            guard kid as? String == privateKeyID else { return "kid" }
        }
        let signingInput = Array("\(parts[0]).\(parts[1])".utf8)
        guard publicKey.verifyRS256(signature: signature, message: signingInput) else { return "signature" }
        guard claims["iss"] as? String == FakeGooglePlay.clientEmail else { return "iss" }
        guard !scopes.isEmpty, scopes.isSubset(of: Self.grantableScopes) else { return "scope" }
        let tokenURI = state.withLock { $0.tokenURI }
        guard claims["aud"] as? String == tokenURI else { return "aud" }
        guard let issuedAt = (claims["iat"] as? NSNumber)?.int64Value, let expires = (claims["exp"] as? NSNumber)?.int64Value
        else { return "iat or exp" }
        let now = Int64(Date().timeIntervalSince1970)
        guard issuedAt <= now + Self.skewSeconds else { return "iat" }
        guard expires > now, expires - issuedAt <= 3_600 else { return "exp" }
        return nil
    }

    // MARK: The API

    func api(_ request: Request) -> Response {
        let tokenProblem = checkBearer(request.headers["authorization"], scope: GooglePlay.androidPublisherScope)
        if let failure = record(request, problem: tokenProblem) { return Self.answer(failure) }
        if tokenProblem == "scope" {
            return Self.googleError(403, reason: "insufficientPermissions", message: "Request had insufficient authentication scopes.")
        }
        if tokenProblem != nil {
            var response = Self.googleError(401, reason: "authError", message: "Invalid Credentials")
            response.headers.append(("WWW-Authenticate", #"Bearer realm="https://accounts.google.com/""#))
            return response
        }
        guard request.pathParameters["package"] == packageName else {
            return Self.googleError(404, reason: "applicationNotFound",
                                    message: "No application was found for the given package name.")
        }
        if request.path.hasSuffix("/voidedpurchases") { return voided(request) }
        let productID = request.pathParameters["productId"] ?? ""
        var token = request.pathParameters["token"] ?? ""
        if request.method == "POST" {
            guard token.hasSuffix(":consume") else { return Self.googleError(404, reason: "notFound", message: "Not Found") }
            token.removeLast(":consume".count)
            return consume(productID: productID, token: token)
        }
        switch state.withLock({ $0.purchases[Self.key(productID, token)] }) {
        case nil:
            return Self.googleError(404, reason: "notFound", message: "The purchase token was not found.")
        case .gone?:
            return Self.googleError(410, reason: "deleted", message: "The purchase token is no longer available.")
        case .raw(let text)?:
            return Response(status: 200, headers: [("Content-Type", "application/json")], body: Array(text.utf8))
        case .purchase(let purchase)?:
            return Self.json(purchase.json(productID: productID))
        }
    }

    private func consume(productID: String, token: String) -> Response {
        let key = Self.key(productID, token)
        let outcome = state.withLock { state -> Int in
            switch state.purchases[key] {
            case nil: return 404
            case .gone?: return 410
            case .raw?:
                state.consumed.append((productID, token))
                return 200
            case .purchase(var purchase)?:
                // What Google answers for a purchase consumed already.
                guard purchase.consumptionState == 0 else { return 400 }
                purchase.consumptionState = 1
                state.purchases[key] = .purchase(purchase)
                state.consumed.append((productID, token))
                return 200
            }
        }
        switch outcome {
        case 404: return Self.googleError(404, reason: "notFound", message: "The purchase token was not found.")
        case 410: return Self.googleError(410, reason: "deleted", message: "The purchase token is no longer available.")
        case 400: return Self.googleError(400, reason: "productNotOwnedByUser",
                                          message: "The product purchase is not owned by the user.")
        default: return Response(status: 200)
        }
    }

    private func voided(_ request: Request) -> Response {
        let query = request.query
        let cursor: Cursor
        if let pageToken = query["token"] ?? query["pageSelection.token"] {
            // Google ignores the times when a page token is given.
            guard let saved = state.withLock({ $0.pages[pageToken] }) else {
                return Self.googleError(400, reason: "invalid", message: "Invalid page token.")
            }
            cursor = saved
        } else {
            let nowMilliseconds = Int64(Date().timeIntervalSince1970 * 1000)
            let skewMilliseconds = Self.skewSeconds * 1000
            var malformed = false
            func number(_ name: String) -> Int64? {
                guard let text = query[name] else { return nil }
                guard let value = Int64(text) else {
                    malformed = true
                    return nil
                }
                return value
            }
            let start = number("startTime"), end = number("endTime"), type = number("type")
            let maxResults = number("maxResults") ?? number("pageSelection.maxResults")
            guard !malformed else { return Self.googleError(400, reason: "invalid", message: "Invalid Value") }
            let startMilliseconds = start ?? nowMilliseconds - Self.voidedWindowMilliseconds
            let endMilliseconds = end ?? nowMilliseconds
            guard startMilliseconds >= nowMilliseconds - Self.voidedWindowMilliseconds - skewMilliseconds else {
                return Self.googleError(400, reason: "invalid", message: "startTime is older than 30 days.")
            }
            guard endMilliseconds <= nowMilliseconds + skewMilliseconds else {
                return Self.googleError(400, reason: "invalid", message: "endTime is in the future.")
            }
            guard startMilliseconds <= endMilliseconds else {
                return Self.googleError(400, reason: "invalid", message: "startTime is after endTime.")
            }
            guard [0, 1].contains(type ?? 0), (1...1_000).contains(maxResults ?? 1_000) else {
                return Self.googleError(400, reason: "invalid", message: "Invalid Value")
            }
            let partial = query["includeQuantityBasedPartialRefund"] ?? "false"
            guard partial == "true" || partial == "false" else {
                return Self.googleError(400, reason: "invalid", message: "Invalid Value")
            }
            cursor = Cursor(startMilliseconds: startMilliseconds, endMilliseconds: endMilliseconds,
                            includeSubscriptions: type == 1, includePartialRefunds: partial == "true",
                            maxResults: Int(maxResults ?? 1_000), offset: 0)
        }
        let (page, nextToken) = state.withLock { state -> ([FakeGooglePlay.Voided], String?) in
            let matching = state.voided.filter { voided in
                (cursor.includeSubscriptions || !voided.isSubscription)
                    && (cursor.includePartialRefunds || voided.voidedQuantity == nil)
                    && cursor.startMilliseconds <= voided.voidedTimeMillis
                    && voided.voidedTimeMillis <= cursor.endMilliseconds
            }.sorted { $0.voidedTimeMillis < $1.voidedTimeMillis }
            let size = min(cursor.maxResults, state.voidedPageSize)
            let start = min(cursor.offset, matching.count)
            let end = min(start + size, matching.count)
            guard end < matching.count else { return (Array(matching[start..<end]), nil) }
            let token = Base64URL.encode(SecureRandom.bytes(count: 12))
            var next = cursor
            next.offset = end
            state.pages[token] = next
            return (Array(matching[start..<end]), token)
        }
        var answer: [String: Any] = [
            "pageInfo": ["resultPerPage": page.count, "startIndex": cursor.offset] as [String: Any],
        ]
        if !page.isEmpty { answer["voidedPurchases"] = page.map(\.json) }
        if let nextToken { answer["tokenPagination"] = ["nextPageToken": nextToken] }
        return Self.json(answer)
    }

    // MARK: Pub/Sub

    /// `projects.subscriptions.get`. Pub/Sub's errors carry `code`,
    /// `message` and `status`, without the older `errors` list.
    func subscription(_ request: Request) -> Response {
        let tokenProblem = checkBearer(request.headers["authorization"], scope: Self.pubSubScope)
        if let failure = record(request, problem: tokenProblem) { return Self.answer(failure) }
        if tokenProblem == "scope" {
            return Self.pubSubError(403, "PERMISSION_DENIED", "Request had insufficient authentication scopes.")
        }
        if tokenProblem != nil {
            return Self.pubSubError(401, "UNAUTHENTICATED", "Request had invalid authentication credentials.")
        }
        let name = "projects/\(request.pathParameters["project"] ?? "")/subscriptions/\(request.pathParameters["subscription"] ?? "")"
        guard let subscription = state.withLock({ $0.subscriptions[name] }) else {
            return Self.pubSubError(404, "NOT_FOUND", "Resource not found (resource=\(request.pathParameters["subscription"] ?? "")).")
        }
        return Self.json(subscription.json)
    }

    private static func pubSubError(_ status: Int, _ statusName: String, _ message: String) -> Response {
        Response(status: status, headers: [("Content-Type", "application/json; charset=UTF-8")],
                 body: jsonBytes(["error": ["code": status, "message": message, "status": statusName] as [String: Any]]))
    }

    /// nil when the bearer token passes for `scope`; else why not.
    private func checkBearer(_ authorization: String?, scope: String) -> String? {
        guard let authorization, authorization.hasPrefix("Bearer ") else { return "no bearer token" }
        let token = String(authorization.dropFirst("Bearer ".count))
        guard let issued = state.withLock({ $0.issued[token] }) else { return "unknown token" }
        guard issued.expires > Date() else { return "expired token" }
        guard issued.scopes.contains(scope) else { return "scope" }
        return nil
    }

    // MARK: Recording and answering

    /// Records the request and takes the first scripted failure for it.
    private func record(_ request: Request, problem: String?) -> FakeGooglePlay.Failure? {
        let received = FakeGooglePlay.Received(method: request.method, path: request.path, query: request.query,
                                               authorized: problem == nil, tokenProblem: problem)
        return state.withLock { state -> FakeGooglePlay.Failure? in
            state.received.append(received)
            guard let index = state.failures.firstIndex(where: { failure in
                failure.pathContaining.map { request.path.contains($0) } ?? true
            }) else { return nil }
            return state.failures.remove(at: index)
        }
    }

    private static func answer(_ failure: FakeGooglePlay.Failure) -> Response {
        var headers: [(name: String, value: String)] = [("Content-Type", "application/json")]
        if let retryAfter = failure.retryAfter { headers.append(("Retry-After", retryAfter)) }
        return Response(status: failure.status, headers: headers, body: Array(failure.body.utf8))
    }

    static func jsonBytes(_ object: [String: Any]) -> [UInt8] {
        Array((try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys])) ?? Data())
    }

    private static func json(_ object: [String: Any]) -> Response {
        Response(status: 200, headers: [("Content-Type", "application/json")], body: jsonBytes(object))
    }

    private static func googleError(_ status: Int, reason: String, message: String) -> Response {
        Response(status: status, headers: [("Content-Type", "application/json; charset=UTF-8")],
                 body: FakeGooglePlay.errorBody(status, reason: reason, message: message))
    }

    private static func oauthError(_ error: String, _ description: String) -> Response {
        Response(status: 400, headers: [("Content-Type", "application/json; charset=utf-8")],
                 body: jsonBytes(["error": error, "error_description": description]))
    }
}
