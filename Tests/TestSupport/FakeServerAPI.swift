public import Crypto
import Foundation
import HTTPServer
import Locking
import Logging

/// A stand-in for the App Store Server API on a real loopback socket, served
/// by the product's own HTTP server. Production lives under `/production`,
/// Sandbox under `/sandbox`, so one fake serves both base URLs.
///
/// It checks every request's bearer token the way Apple documents: an ES256
/// JWT whose header names `alg` ES256, the configured `kid` and `typ` JWT,
/// whose claims carry the configured `iss` and `bid`, `aud`
/// `appstoreconnect-v1`, an `iat` not in the future, and an `exp` later than
/// now and at most 60 minutes after `iat`, signed by the configured public
/// key. Anything else is 401, as Apple answers.
///
/// Tests load it with signed transactions and notifications, and can make
/// the next requests fail with a status of their choice.
public final class FakeServerAPI: Sendable {
    public struct Credentials: Sendable {
        public var keyID: String
        public var issuerID: String
        public var bundleID: String
        public var publicKey: PublicKey

        public init(keyID: String, issuerID: String, bundleID: String, publicKey: PublicKey) {
            self.keyID = keyID
            self.issuerID = issuerID
            self.bundleID = bundleID
            self.publicKey = publicKey
        }
    }

    /// One request as received.
    public struct Received: Sendable {
        public var method: String
        /// `Production` or `Sandbox`.
        public var environment: String
        /// The path below the environment's prefix, such as `/inApps/v1/transactions/1`.
        public var path: String
        public var body: [UInt8]
        /// Whether its token passed every check.
        public var authorized: Bool
        /// Why the token was refused, when it was.
        public var tokenProblem: String?

        public var bodyJSON: [String: Any]? {
            (try? JSONSerialization.jsonObject(with: Data(body))) as? [String: Any]
        }
    }

    /// A scripted answer for the next matching requests.
    public struct Failure: Sendable {
        public var status: Int
        public var retryAfter: String?
        public var body: String
        /// Only requests whose path contains this; nil matches every request.
        public var pathContaining: String?

        public init(status: Int, retryAfter: String? = nil, body: String = "", pathContaining: String? = nil) {
            self.status = status
            self.retryAfter = retryAfter
            self.body = body
            self.pathContaining = pathContaining
        }
    }

    private struct State: Sendable {
        var transactions: [String: [String: String]] = [:]
        /// Per environment: (signedDate in ms, signedPayload), in the order added.
        var history: [String: [(Int64, String)]] = [:]
        var failures: [Failure] = []
        var received: [Received] = []
    }

    /// Notifications per history page; small, so tests cross pages.
    public let historyPageSize: Int
    public let credentials: Credentials
    private let state = Locked(State())
    private let server: Server

    public init(credentials: Credentials, historyPageSize: Int = 2) throws {
        self.credentials = credentials
        self.historyPageSize = historyPageSize
        let router = Router()
        server = Server(
            configuration: .init(host: "127.0.0.1", port: 0, threads: 2, maxBodyBytes: 1 << 20, maxHeaderBytes: 16 << 10,
                                 maxConnections: 64, idleTimeoutSeconds: 30, requestTimeoutSeconds: 30,
                                 shutdownGraceSeconds: 1),
            router: router, logger: Logger(label: "fake-appstore-api", level: .error))
        router.add("GET", "/{environment}/inApps/v1/transactions/{id}", sync: { [self] in try answer($0) })
        router.add("POST", "/{environment}/inApps/v1/notifications/history", sync: { [self] in try answer($0) })
        router.add("PUT", "/{environment}/inApps/v2/transactions/consumption/{id}", sync: { [self] in try answer($0) })
        try server.start()
    }

    public func stop() {
        server.shutdown()
    }

    public var productionURL: String { "http://127.0.0.1:\(server.port)/production" }
    public var sandboxURL: String { "http://127.0.0.1:\(server.port)/sandbox" }

    // MARK: Scripting

    /// Get Transaction Info answers `signedTransactionInfo` for `id` in `environment`.
    public func addTransaction(_ id: String, signed: String, environment: String) {
        state.withLock { $0.transactions[environment, default: [:]][id] = signed }
    }

    /// Notification History holds `signedPayload`, sent at `signedDateMilliseconds`.
    public func addNotification(_ signedPayload: String, signedDateMilliseconds: Int64, environment: String) {
        state.withLock { $0.history[environment, default: []].append((signedDateMilliseconds, signedPayload)) }
    }

    /// The next `count` matching requests get `failure` instead of an answer.
    public func fail(_ failure: Failure, count: Int) {
        state.withLock { $0.failures += Array(repeating: failure, count: count) }
    }

    /// Drops every scripted failure not used yet.
    public func clearFailures() {
        state.withLock { $0.failures.removeAll() }
    }

    public var received: [Received] {
        state.withLock { $0.received }
    }

    public func received(pathContaining text: String) -> [Received] {
        received.filter { $0.path.contains(text) }
    }

    // MARK: Answers

    private func answer(_ request: Request) throws -> Response {
        let environmentPrefix = request.pathParameters["environment"] ?? ""
        let environment = environmentPrefix == "sandbox" ? "Sandbox" : environmentPrefix == "production" ? "Production" : ""
        let path = String(request.path.dropFirst(environmentPrefix.count + 1))
        let tokenProblem = checkToken(request.headers["authorization"])
        let received = Received(method: request.method, environment: environment, path: path, body: request.body,
                                authorized: tokenProblem == nil, tokenProblem: tokenProblem)
        let failure = state.withLock { state -> Failure? in
            state.received.append(received)
            guard let index = state.failures.firstIndex(where: { failure in
                failure.pathContaining.map { path.contains($0) } ?? true
            }) else { return nil }
            return state.failures.remove(at: index)
        }
        guard !environment.isEmpty else { return Self.error(404, code: 4040000) }
        guard tokenProblem == nil else { return Response(status: 401) }
        if let failure {
            var headers: [(name: String, value: String)] = []
            if let retryAfter = failure.retryAfter { headers.append(("Retry-After", retryAfter)) }
            return Response(status: failure.status, headers: headers, body: Array(failure.body.utf8))
        }
        switch request.method {
        case "GET":
            let id = request.pathParameters["id"] ?? ""
            guard let signed = state.withLock({ $0.transactions[environment]?[id] }) else {
                return Self.error(404, code: 4_040_010)
            }
            return Self.json(["signedTransactionInfo": signed])
        case "POST":
            return history(request, environment: environment)
        default:
            return consumption(request)
        }
    }

    private func history(_ request: Request, environment: String) -> Response {
        guard let body = (try? JSONSerialization.jsonObject(with: Data(request.body))) as? [String: Any],
              let start = (body["startDate"] as? NSNumber)?.int64Value, let end = (body["endDate"] as? NSNumber)?.int64Value,
              start < end else {
            return Self.error(400, code: 4_000_006)
        }
        let offset = request.query["paginationToken"].flatMap(Int.init) ?? 0
        let matching = state.withLock { $0.history[environment] ?? [] }.filter { start <= $0.0 && $0.0 < end }.map(\.1)
        guard offset >= 0, offset <= matching.count else { return Self.error(400, code: 4_000_004) }
        let page = Array(matching[offset..<min(offset + historyPageSize, matching.count)])
        let hasMore = offset + page.count < matching.count
        var answer: [String: Any] = ["notificationHistory": page.map { ["signedPayload": $0] }, "hasMore": hasMore]
        if hasMore { answer["paginationToken"] = String(offset + page.count) }
        return Self.json(answer)
    }

    /// Version 2's rules: consent required, a known delivery status, a
    /// percentage in milliunits only with DELIVERED, a known preference.
    private func consumption(_ request: Request) -> Response {
        guard let body = (try? JSONSerialization.jsonObject(with: Data(request.body))) as? [String: Any],
              body["customerConsented"] as? Bool == true,
              let delivery = body["deliveryStatus"] as? String,
              ["DELIVERED", "UNDELIVERED_QUALITY_ISSUE", "UNDELIVERED_WRONG_ITEM", "UNDELIVERED_SERVER_OUTAGE",
               "UNDELIVERED_OTHER"].contains(delivery),
              body["sampleContentProvided"] is Bool
        else { return Self.error(400, code: 4_000_023) }
        if let percentage = body["consumptionPercentage"] {
            guard delivery == "DELIVERED", let value = (percentage as? NSNumber)?.intValue, (0...100_000).contains(value) else {
                return Self.error(400, code: 4_000_024)
            }
        }
        if let preference = body["refundPreference"] {
            guard let text = preference as? String, ["DECLINE", "GRANT_FULL", "GRANT_PRORATED"].contains(text) else {
                return Self.error(400, code: 4_000_025)
            }
        }
        return Response(status: 202)
    }

    /// nil when the token passes; else why not.
    private func checkToken(_ authorization: String?) -> String? {
        guard let authorization, authorization.hasPrefix("Bearer ") else { return "no bearer token" }
        let parts = authorization.dropFirst("Bearer ".count).split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3, let headerBytes = Base64URL.decode(String(parts[0])),
              let claimsBytes = Base64URL.decode(String(parts[1])), let signature = Base64URL.decode(String(parts[2])),
              let header = (try? JSONSerialization.jsonObject(with: Data(headerBytes))) as? [String: Any],
              let claims = (try? JSONSerialization.jsonObject(with: Data(claimsBytes))) as? [String: Any]
        else { return "not a JWT" }
        guard header["alg"] as? String == "ES256" else { return "alg" }
        guard header["kid"] as? String == credentials.keyID else { return "kid" }
        guard header["typ"] as? String == "JWT" else { return "typ" }
        guard claims["iss"] as? String == credentials.issuerID else { return "iss" }
        guard claims["aud"] as? String == "appstoreconnect-v1" else { return "aud" }
        guard claims["bid"] as? String == credentials.bundleID else { return "bid" }
        guard let issuedAt = (claims["iat"] as? NSNumber)?.int64Value, let expires = (claims["exp"] as? NSNumber)?.int64Value
        else { return "iat or exp" }
        let now = Int64(Date().timeIntervalSince1970)
        guard issuedAt <= now + 60, expires > now, expires - issuedAt <= 3_600 else { return "exp" }
        let signingInput = Array("\(parts[0]).\(parts[1])".utf8)
        guard credentials.publicKey.verifyES256(rawSignature: signature, message: signingInput) else { return "signature" }
        return nil
    }

    private static func json(_ object: [String: Any]) -> Response {
        let body = (try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys])) ?? Data()
        return Response(status: 200, headers: [("Content-Type", "application/json")], body: Array(body))
    }

    private static func error(_ status: Int, code: Int) -> Response {
        Response(status: status, headers: [("Content-Type", "application/json")],
                 body: Array(#"{"errorCode":\#(code),"errorMessage":"fake"}"#.utf8))
    }
}
