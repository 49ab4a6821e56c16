public import Foundation
import JSON
public import Locking
public import StoreHTTP
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// A client of the Google Play Developer API (Android Publisher v3) for
/// one-time products: get a purchase, consume it, and list voided purchases.
///
/// Every request carries an OAuth access token from `AccessTokens`, fetched
/// once and shared. A 401 drops that token and the call is made once more
/// with a new one, within the same deadline; a second 401 is final. A call
/// blocks its thread until it has an answer or its deadline passes, so it
/// must not run on a server thread.
///
/// Retries are `RetryingCall`'s, the same as for the App Store: 429, 5xx and
/// no answer are tried again within the deadline; what is still failing then
/// is `unavailable`. Any other status is final.
public struct PlayClient: Sendable {
    /// The operations this client calls, and the token grant they need: the
    /// only values of the `endpoint` label of
    /// `wallet_googleplay_api_requests_total{endpoint,status}`.
    public enum Endpoint: String, Sendable, CaseIterable {
        case getProductPurchase = "get_product_purchase"
        case consumeProductPurchase = "consume_product_purchase"
        case listVoidedPurchases = "list_voided_purchases"
        /// The OAuth token endpoint (`token_uri`).
        case token
    }

    /// An answer's class: the only values of the `status` metric label.
    public typealias StatusClass = StoreHTTP.StatusClass

    public struct Configuration: Sendable {
        public var apiURL: URL
        /// The app's package name, such as `com.example.coins`.
        public var packageName: String
        /// The limit for one whole call, retries and the token grant included.
        public var timeoutSeconds: Double
        /// Largest answer read. A voided-purchases page holds at most 1000
        /// entries of about 300 bytes each.
        public var responseBytesMax: Int

        public static let googleAPIURL = URL(string: "https://androidpublisher.googleapis.com")!

        public init(packageName: String, apiURL: URL = Self.googleAPIURL, timeoutSeconds: Double = 10,
                    responseBytesMax: Int = 1 << 20) {
            self.apiURL = apiURL
            self.packageName = packageName
            self.timeoutSeconds = timeoutSeconds
            self.responseBytesMax = responseBytesMax
        }
    }

    /// The most voided purchases Google returns in one page, and what every
    /// list call asks for.
    public static let voidedPageSizeMax = 1_000

    public let configuration: Configuration
    /// The access tokens every call uses; share one instance per account.
    public let tokens: AccessTokens
    /// Called after every HTTP exchange, retries included.
    private let observe: @Sendable (Endpoint, StatusClass, Double) -> Void

    /// A client with its own `AccessTokens`, whose grants are observed as
    /// the `token` endpoint. `clock` times the pauses between retries and
    /// the tokens' lives.
    public init(configuration: Configuration, account: ServiceAccount, clock: any WorkClock = SystemClock(),
                observe: @escaping @Sendable (Endpoint, StatusClass, Double) -> Void = { _, _, _ in }) {
        let tokens = AccessTokens(account: account, clock: clock) { status, seconds in observe(.token, status, seconds) }
        self.init(configuration: configuration, tokens: tokens, observe: observe)
    }

    /// A client that shares `tokens` with others, and their clock.
    public init(configuration: Configuration, tokens: AccessTokens,
                observe: @escaping @Sendable (Endpoint, StatusClass, Double) -> Void = { _, _, _ in }) {
        precondition(configuration.timeoutSeconds.isFinite && configuration.timeoutSeconds > 0,
                     "PlayClient timeoutSeconds must be positive and finite")
        precondition(!configuration.packageName.isEmpty, "PlayClient packageName must not be empty")
        precondition(configuration.responseBytesMax > 0, "PlayClient responseBytesMax must be positive")
        self.configuration = configuration
        self.tokens = tokens
        self.observe = observe
    }

    /// A deadline `timeoutSeconds` from now.
    public func deadline() -> ContinuousClock.Instant {
        .now + .seconds(configuration.timeoutSeconds)
    }

    // MARK: Operations

    /// `purchases.products.get`: the state of the purchase `token` of `productID`.
    public func productPurchase(productID: String, token: String,
                                deadline: ContinuousClock.Instant) throws(PlayAPIError) -> ProductPurchase {
        let body = try call(.getProductPurchase, "GET", productPath(productID: productID, token: token),
                            deadline: deadline)
        do {
            // Google documents the resource as a typed record (ProductPurchase,
            // int64 fields as strings); Foundation's decoder maps it onto the
            // `Decodable` type in Purchases.swift.
            return try JSONDecoder().decode(ProductPurchase.self, from: body)
        } catch {
            throw .malformedAnswer("the product purchase does not decode (\(Self.decodingProblem(error)))")
        }
    }

    /// `purchases.products.consume`: the purchase can be bought again.
    /// Google answers with an empty body.
    public func consume(productID: String, token: String, deadline: ContinuousClock.Instant) throws(PlayAPIError) {
        _ = try call(.consumeProductPurchase, "POST", productPath(productID: productID, token: token) + ":consume",
                     deadline: deadline)
    }

    /// `purchases.voidedpurchases.list`: one page of in-app purchases voided
    /// from `startTime` (no more than 30 days ago, Google says) to `endTime`
    /// (nil: now), quantity-based partial refunds included. Google ignores
    /// the times when `pageToken` is given: the token carries the query.
    public func voidedPurchases(startTime: Date, endTime: Date?, pageToken: String?,
                                deadline: ContinuousClock.Instant) throws(PlayAPIError) -> VoidedPage {
        var path = "/androidpublisher/v3/applications/" + RetryingCall.percentEncoded(configuration.packageName)
            + "/purchases/voidedpurchases?startTime=\(Self.milliseconds(startTime))"
            + "&type=0&includeQuantityBasedPartialRefund=true&maxResults=\(Self.voidedPageSizeMax)"
        if let endTime { path += "&endTime=\(Self.milliseconds(endTime))" }
        if let pageToken { path += "&token=" + RetryingCall.percentEncoded(pageToken) }
        let body = try call(.listVoidedPurchases, "GET", path, deadline: deadline)
        let page: VoidedPage
        do {
            // Google's documented list resource, onto its `Decodable` type in
            // Purchases.swift, as for a product purchase.
            page = try JSONDecoder().decode(VoidedPage.self, from: body)
        } catch {
            throw .malformedAnswer("the voided purchases do not decode (\(Self.decodingProblem(error)))")
        }
        // A page that names itself as the next would page forever.
        if let next = page.nextPageToken, next == pageToken {
            throw .malformedAnswer("the next page token is the current one")
        }
        return page
    }

    // MARK: Exchanges

    private func productPath(productID: String, token: String) -> String {
        "/androidpublisher/v3/applications/" + RetryingCall.percentEncoded(configuration.packageName)
            + "/purchases/products/" + RetryingCall.percentEncoded(productID)
            + "/tokens/" + RetryingCall.percentEncoded(token)
    }

    /// One operation, with the 401 rule `GoogleAPICall` keeps for every Google API.
    private func call(_ endpoint: Endpoint, _ method: String, _ path: String,
                      deadline: ContinuousClock.Instant) throws(PlayAPIError) -> Data {
        try GoogleAPICall.send(name: endpoint.rawValue, method: method, base: configuration.apiURL, path: path,
                               tokens: tokens, responseBytesMax: configuration.responseBytesMax, deadline: deadline,
                               observe: { status, seconds in observe(endpoint, status, seconds) })
    }

    /// Where decoding failed, by field names only: never a value.
    static func decodingProblem(_ error: any Error) -> String {
        let context: DecodingError.Context
        switch error as? DecodingError {
        case .typeMismatch(_, let found), .valueNotFound(_, let found), .dataCorrupted(let found):
            context = found
        case .keyNotFound(let key, let found):
            return "no " + (found.codingPath + [key]).map(\.stringValue).joined(separator: ".")
        default:
            return "not JSON"
        }
        let path = context.codingPath.map(\.stringValue).joined(separator: ".")
        return path.isEmpty ? "not a JSON object" : "bad " + path
    }

    static func milliseconds(_ date: Date) -> Int64 {
        Int64((date.timeIntervalSince1970 * 1000).rounded(.down))
    }
}

/// Why a call to a Google API (the Play Developer API, or Pub/Sub's for the
/// push subscription) gave no answer to use. No case ever holds an access
/// token, an assertion or a purchase token.
public enum PlayAPIError: Error, Sendable, Equatable, CustomStringConvertible {
    /// HTTP 404 or 410 from the API: Google knows no such purchase (or no
    /// longer keeps it).
    case notFound
    /// Google could not be asked or did not answer: no connection, the time
    /// limit, 429 and 5xx until the deadline, the token endpoint unreachable.
    /// Nothing is known.
    case unavailable(String)
    /// Any other status, from the API or the token endpoint. `reason` is
    /// Google's first `error.errors[].reason` (such as
    /// `productNotOwnedByUser`), or the token endpoint's OAuth `error` (such
    /// as `invalid_grant`: a deleted key, or a clock far off).
    case refused(status: Int, reason: String?)
    /// A success whose body is not what Google documents.
    case malformedAnswer(String)

    public var description: String {
        switch self {
        case .notFound: "not found"
        case .unavailable(let detail): "unavailable: \(detail)"
        case .refused(let status, let reason): "HTTP \(status) (reason \(reason ?? "none"))"
        case .malformedAnswer(let detail): "malformed answer: \(detail)"
        }
    }

    /// Longest reason kept. Google's are camelCase words or OAuth codes.
    static let reasonCharactersMax = 64

    /// The reason in an error body: Google API errors
    /// (`{"error":{"errors":[{"reason":…}],"status":…}}`) or OAuth errors
    /// (`{"error":"invalid_grant"}`). Only a short word of letters, digits,
    /// `_`, `.` and `-` is kept, since it goes into logs and errors verbatim.
    static func reason(_ body: Data) -> String? {
        guard let error = (try? JSONParser.parse(body))?["error"] else { return nil }
        let found: String?
        if let oauth = error.stringValue {
            found = oauth
        } else if error.objectMembers != nil {
            let first = error["errors"]?.arrayValue?.first
            found = first?["reason"]?.stringValue ?? error["status"]?.stringValue
        } else {
            found = nil
        }
        guard let found, !found.isEmpty, found.count <= reasonCharactersMax,
              found.unicodeScalars.allSatisfy({ scalar in
                  scalar.isASCII && (CharacterSet.alphanumerics.contains(scalar) || "_.-".unicodeScalars.contains(scalar))
              })
        else { return nil }
        return found
    }
}
