public import Crypto
public import Foundation
public import Locking
import JSON
public import StoreHTTP
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// A client of the App Store Server API: Get Transaction Info, Get
/// Notification History and Send Consumption Information.
///
/// Every request carries a fresh ES256 token signed with the In-App
/// Purchase key (`ServerAPIToken`). A call blocks its thread until it has an
/// answer or its deadline passes, so it must not run on a server thread.
///
/// Retries are `RetryingCall`'s: 429, 5xx and no answer are tried again
/// within the deadline; what is still failing then is `unavailable`. Any
/// other status is final.
public struct ServerAPIClient: Sendable {
    /// The operations this client calls: the only values of the `endpoint`
    /// metric label.
    public enum Endpoint: String, Sendable, CaseIterable {
        case getTransactionInfo = "get_transaction_info"
        case getNotificationHistory = "get_notification_history"
        case sendConsumptionInformation = "send_consumption_information"
    }

    /// An answer's class: the only values of the `status` metric label.
    public typealias StatusClass = StoreHTTP.StatusClass

    public struct Configuration: Sendable {
        public var token: ServerAPIToken.Claims
        public var productionURL: URL
        public var sandboxURL: URL
        /// The limit for one whole call, retries included.
        public var timeoutSeconds: Double
        /// Largest answer read. A history page holds at most 20 signed
        /// notifications of a few kilobytes each.
        public var responseBytesMax: Int

        public static let appleProductionURL = URL(string: "https://api.storekit.itunes.apple.com")!
        public static let appleSandboxURL = URL(string: "https://api.storekit-sandbox.apple.com")!

        public init(token: ServerAPIToken.Claims, productionURL: URL = Self.appleProductionURL,
                    sandboxURL: URL = Self.appleSandboxURL, timeoutSeconds: Double = 10,
                    responseBytesMax: Int = 1 << 20) {
            self.token = token
            self.productionURL = productionURL
            self.sandboxURL = sandboxURL
            self.timeoutSeconds = timeoutSeconds
            self.responseBytesMax = responseBytesMax
        }
    }

    public enum APIError: Error, Sendable, Equatable, CustomStringConvertible {
        /// HTTP 404, with Apple's `errorCode` when the body has one.
        case notFound(errorCode: Int?)
        /// Apple could not be asked or did not answer: no connection, the
        /// time limit, or 429 and 5xx until the deadline. Nothing is known.
        case unavailable(String)
        /// Any other status: the request or the key is wrong (401 is the key).
        case refused(status: Int, errorCode: Int?)
        /// A success whose body is not what Apple documents.
        case malformedAnswer(String)

        public var description: String {
            switch self {
            case .notFound(let code): "not found (errorCode \(code.map(String.init) ?? "none"))"
            case .unavailable(let detail): "unavailable: \(detail)"
            case .refused(let status, let code): "HTTP \(status) (errorCode \(code.map(String.init) ?? "none"))"
            case .malformedAnswer(let detail): "malformed answer: \(detail)"
            }
        }
    }

    /// One page of notification history.
    public struct HistoryPage: Sendable, Equatable {
        public var signedPayloads: [String]
        public var hasMore: Bool
        public var paginationToken: String?
    }

    /// Apple's errorCode for "no transaction with this id".
    public static let transactionIDNotFound = 4_040_010

    public let configuration: Configuration
    private let key: PrivateKey
    /// Called after every HTTP exchange, retries included.
    private let observe: @Sendable (Endpoint, StatusClass, Double) -> Void
    /// Called on every 401.
    private let unauthorized: @Sendable () -> Void
    /// Times the pauses between retries.
    private let clock: any WorkClock

    public init(configuration: Configuration, key: PrivateKey, clock: any WorkClock = SystemClock(),
                observe: @escaping @Sendable (Endpoint, StatusClass, Double) -> Void = { _, _, _ in },
                unauthorized: @escaping @Sendable () -> Void = {}) {
        self.clock = clock
        precondition(configuration.timeoutSeconds.isFinite && configuration.timeoutSeconds > 0,
                     "ServerAPIClient timeoutSeconds must be positive and finite")
        self.configuration = configuration
        self.key = key
        self.observe = observe
        self.unauthorized = unauthorized
    }

    /// A deadline `timeoutSeconds` from now.
    public func deadline() -> ContinuousClock.Instant {
        .now + .seconds(configuration.timeoutSeconds)
    }

    // MARK: Operations

    /// Get Transaction Info: `signedTransactionInfo` for `transactionID`.
    public func transactionInfo(_ transactionID: String, environment: Environment,
                                deadline: ContinuousClock.Instant) throws(APIError) -> String {
        let path = "/inApps/v1/transactions/" + RetryingCall.percentEncoded(transactionID)
        let body = try call(.getTransactionInfo, "GET", path, environment: environment, body: nil, deadline: deadline)
        guard let signed = Self.object(body)?["signedTransactionInfo"]?.stringValue, !signed.isEmpty else {
            throw .malformedAnswer("no signedTransactionInfo")
        }
        return signed
    }

    /// Get Notification History: one page of what Apple sent, or tried to
    /// send, between `start` and `end`.
    public func notificationHistory(environment: Environment, start: Date, end: Date, paginationToken: String?,
                                    deadline: ContinuousClock.Instant) throws(APIError) -> HistoryPage {
        var path = "/inApps/v1/notifications/history"
        if let paginationToken {
            path += "?paginationToken=" + RetryingCall.percentEncoded(paginationToken)
        }
        // Members in key order, as this body has always been written.
        let request: JSONValue = ["endDate": JSONValue(Self.milliseconds(end)), "startDate": JSONValue(Self.milliseconds(start))]
        let requestBody = Data(request.serialized())
        let body = try call(.getNotificationHistory, "POST", path, environment: environment, body: requestBody,
                            deadline: deadline)
        guard let object = Self.object(body), let items = object["notificationHistory"]?.arrayValue else {
            throw .malformedAnswer("no notificationHistory")
        }
        var payloads: [String] = []
        for item in items {
            guard let payload = item["signedPayload"]?.stringValue else {
                throw .malformedAnswer("a history item has no signedPayload")
            }
            payloads.append(payload)
        }
        let hasMore = object["hasMore"]?.boolValue ?? false
        let token = object["paginationToken"]?.stringValue
        if hasMore, token?.isEmpty ?? true {
            throw .malformedAnswer("hasMore without a paginationToken")
        }
        return HistoryPage(signedPayloads: payloads, hasMore: hasMore, paginationToken: token)
    }

    /// Send Consumption Information (version 2): Apple answers 202.
    public func sendConsumption(_ transactionID: String, environment: Environment, body: Data,
                                deadline: ContinuousClock.Instant) throws(APIError) {
        let path = "/inApps/v2/transactions/consumption/" + RetryingCall.percentEncoded(transactionID)
        _ = try call(.sendConsumptionInformation, "PUT", path, environment: environment, body: body, deadline: deadline)
    }

    // MARK: Exchanges

    private func call(_ endpoint: Endpoint, _ method: String, _ path: String, environment: Environment, body: Data?,
                      deadline: ContinuousClock.Instant) throws(APIError) -> Data {
        let base = environment == .sandbox ? configuration.sandboxURL : configuration.productionURL
        guard let url = URL(string: base.absoluteString.trimmingSuffix("/") + path) else {
            throw .unavailable("the URL for \(endpoint.rawValue) is malformed")
        }
        let answer = RetryingCall.send(
            name: endpoint.rawValue, responseBytesMax: configuration.responseBytesMax, deadline: deadline,
            clock: clock, observe: { status, seconds in observe(endpoint, status, seconds) }
        ) {
            var request = URLRequest(url: url)
            request.httpMethod = method
            request.setValue("Bearer " + (try ServerAPIToken.make(configuration.token, key: key, now: Date())),
                             forHTTPHeaderField: "Authorization")
            request.setValue("application/json", forHTTPHeaderField: "Accept")
            if let body {
                request.httpBody = body
                request.setValue("application/json", forHTTPHeaderField: "Content-Type")
            }
            return request
        }
        switch answer {
        case .unavailable(let detail):
            throw .unavailable(detail)
        case .final(200..<300, let body):
            return body
        case .final(404, let body):
            throw .notFound(errorCode: Self.errorCode(body))
        case .final(let status, let body):
            if status == 401 { unauthorized() }
            throw .refused(status: status, errorCode: Self.errorCode(body))
        }
    }

    static func errorCode(_ body: Data) -> Int? {
        object(body)?["errorCode"]?.integer(as: Int.self)
    }

    /// An answer read by the strict parser, when it is a JSON object.
    static func object(_ body: Data) -> JSONValue? {
        guard let value = try? JSONParser.parse(body), value.objectMembers != nil else { return nil }
        return value
    }

    static func milliseconds(_ date: Date) -> Int64 {
        Int64((date.timeIntervalSince1970 * 1000).rounded(.down))
    }
}

extension String {
    fileprivate func trimmingSuffix(_ suffix: String) -> String {
        var text = self
        while text.hasSuffix(suffix) { text.removeLast(suffix.count) }
        return text
    }
}
