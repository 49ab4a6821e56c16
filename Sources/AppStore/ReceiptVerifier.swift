public import Foundation
import JSON
import StoreHTTP
public import WalletCore
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// Verifies a StoreKit 1 app receipt with Apple's `verifyReceipt` endpoint
/// and finds one consumable purchase in it.
///
/// One call does, in order:
///
/// 1. POST `{"receipt-data", "password", "exclude-old-transactions": false}`
///    to the production URL. A status of 21007 (a sandbox receipt) is sent
///    once more to the sandbox URL if the sandbox is allowed, and refused
///    with `environment_not_allowed` if not.
/// 2. Status 0 is required. 21005, 21009, and 21100...21199 marked
///    `is-retryable`, are Apple being unable to answer (`unavailable`); every
///    other status refuses the receipt (`receipt_invalid`).
/// 3. `receipt.bundle_id` must be configured (`bundle_mismatch`).
/// 4. Every entry of `receipt.in_app` and `latest_receipt_info` whose
///    `transaction_id` is the one asked for is read, and there must be at
///    least one (`transaction_mismatch`). Each must be for the product asked
///    for (`product_mismatch`), none may carry a `cancellation_date`
///    (`revoked`), and all must agree on a `quantity` in 1...10 (`malformed`).
///
/// The environment reported is that of the URL that answered, not a field
/// of the answer.
///
/// Everything that says nothing about the receipt is `unavailable`, so the
/// caller may retry: no connection, the time limit, an HTTP status other
/// than 200 (redirects are not followed), an answer larger than
/// `responseBytesMax`, and an answer that is not a JSON object with an
/// integer `status`. Such a body comes from something in front of Apple, or
/// from Apple having trouble; refusing the receipt for it would turn an
/// outage into lost purchases.
///
/// `verify` blocks its thread for at most `timeoutSeconds` in all, both
/// requests included. Call it from a thread that may block, not from a task
/// on Swift concurrency's shared pool.
public struct ReceiptVerifier: Sendable {
    /// Apple's production endpoint.
    public static let appleProductionURL = URL(string: "https://buy.itunes.apple.com/verifyReceipt")!
    /// Apple's sandbox endpoint.
    public static let appleSandboxURL = URL(string: "https://sandbox.itunes.apple.com/verifyReceipt")!
    /// Largest `receipt-data` sent. App receipts list unfinished consumables
    /// only, so real ones are a few kilobytes to a few hundred.
    public static let receiptDataBytesMax = 1 << 20

    public struct Configuration: Sendable {
        public var productionURL: URL
        public var sandboxURL: URL
        /// The app's shared secret, sent as `password` when set.
        public var sharedSecret: String?
        /// Accepted bundle identifiers. Empty accepts nothing.
        public var bundleIDs: Set<String>
        /// Whether sandbox receipts may be credited.
        public var allowSandbox: Bool
        /// The limit for one whole `verify` call, both requests included.
        /// Must be positive and finite.
        public var timeoutSeconds: Double
        /// Largest answer read from Apple.
        public var responseBytesMax: Int

        public init(
            productionURL: URL = ReceiptVerifier.appleProductionURL,
            sandboxURL: URL = ReceiptVerifier.appleSandboxURL,
            sharedSecret: String? = nil,
            bundleIDs: Set<String>,
            allowSandbox: Bool = false,
            timeoutSeconds: Double = 10,
            responseBytesMax: Int = 4 << 20
        ) {
            self.productionURL = productionURL
            self.sandboxURL = sandboxURL
            self.sharedSecret = sharedSecret
            self.bundleIDs = bundleIDs
            self.allowSandbox = allowSandbox
            self.timeoutSeconds = timeoutSeconds
            self.responseBytesMax = responseBytesMax
        }
    }

    /// A purchase the receipt proves.
    public struct VerifiedReceiptPurchase: Sendable, Equatable {
        public let transactionID: String
        public let productID: String
        /// 1...10.
        public let quantity: Int
        /// `Production` or `Sandbox`: which endpoint vouched for the receipt.
        public let environment: PurchaseEnvironment

        public init(transactionID: String, productID: String, quantity: Int, environment: PurchaseEnvironment) {
            self.transactionID = transactionID
            self.productID = productID
            self.quantity = quantity
            self.environment = environment
        }
    }

    public let configuration: Configuration

    public init(configuration: Configuration) {
        self.configuration = configuration
    }

    /// Asks Apple about `receiptData` (the base64 app receipt) and returns the
    /// purchase `transactionID` of `productID` that it holds.
    public func verify(
        receiptData: String,
        transactionID: String,
        productID: String
    ) throws(ReceiptError) -> VerifiedReceiptPurchase {
        precondition(
            configuration.timeoutSeconds.isFinite && configuration.timeoutSeconds > 0,
            "ReceiptVerifier timeoutSeconds must be positive and finite"
        )
        precondition(configuration.responseBytesMax > 0, "ReceiptVerifier responseBytesMax must be positive")
        let deadline = ContinuousClock.now + .seconds(configuration.timeoutSeconds)

        guard !receiptData.isEmpty else {
            throw .failed(reason: RefusalReason.receiptInvalid, detail: "receipt-data is empty")
        }
        guard receiptData.utf8.count <= Self.receiptDataBytesMax else {
            throw .failed(
                reason: RefusalReason.receiptInvalid,
                detail: "receipt-data is longer than \(Self.receiptDataBytesMax) bytes"
            )
        }
        let body = requestBody(receiptData: receiptData)

        var answer = try ask(configuration.productionURL, "Production", body: body, deadline: deadline)
        var environment = PurchaseEnvironment.production
        if answer.status == Status.sandboxReceiptSentToProduction {
            guard configuration.allowSandbox else {
                throw .failed(
                    reason: RefusalReason.environmentNotAllowed,
                    detail: "the receipt is from the sandbox, and sandbox purchases are not accepted"
                )
            }
            answer = try ask(configuration.sandboxURL, "Sandbox", body: body, deadline: deadline)
            environment = .sandbox
        }
        try Self.checkStatus(answer, environment: environment)
        return try purchase(
            in: answer.object, transactionID: transactionID, productID: productID, environment: environment
        )
    }

    // MARK: - The exchange

    /// `status` values with a meaning of their own (Apple's responseBody.status).
    enum Status {
        static let valid = 0
        static let serverUnavailable = 21005
        static let sandboxReceiptSentToProduction = 21007
        static let internalDataAccessError = 21009
        static let internalDataAccessErrors = 21100...21199
    }

    /// A parsed answer: a JSON object with an integer `status`.
    struct Answer {
        let status: Int
        let object: JSONValue
    }

    /// The members in the order Apple's documentation lists them.
    private func requestBody(receiptData: String) -> Data {
        var members: [(key: String, value: JSONValue)] = [("receipt-data", .string(receiptData))]
        if let sharedSecret = configuration.sharedSecret {
            members.append(("password", .string(sharedSecret)))
        }
        members.append(("exclude-old-transactions", false))
        return Data(JSONValue.object(members).serialized())
    }

    /// POSTs `body` to `url`; `endpoint` names it in `unavailable` details.
    private func ask(_ url: URL, _ endpoint: String, body: Data,
                     deadline: ContinuousClock.Instant) throws(ReceiptError) -> Answer {
        var request = URLRequest(url: url)
        request.httpMethod = "POST"
        request.httpBody = body
        request.setValue("application/json", forHTTPHeaderField: "Content-Type")
        request.setValue("application/json", forHTTPHeaderField: "Accept")
        let data: Data
        switch HTTPExchange.send(request, responseBytesMax: configuration.responseBytesMax, deadline: deadline) {
        case .response(200, _, let received):
            data = received
        case .response(let status, _, _):
            throw .unavailable("\(endpoint): HTTP status \(status)")
        case .failure(let detail):
            throw .unavailable("\(endpoint): \(detail)")
        }
        guard let object = try? JSONParser.parse(data), object.objectMembers != nil else {
            throw .unavailable("\(endpoint): the answer is not a JSON object")
        }
        guard let status = Self.integer(object["status"]) else {
            throw .unavailable("\(endpoint): the answer has no integer status")
        }
        return Answer(status: status, object: object)
    }

    private static func checkStatus(_ answer: Answer, environment: PurchaseEnvironment) throws(ReceiptError) {
        switch answer.status {
        case Status.valid:
            return
        case Status.serverUnavailable, Status.internalDataAccessError:
            throw .unavailable("\(environment.rawValue): Apple answered status \(answer.status)")
        case Status.internalDataAccessErrors where isRetryable(answer.object["is-retryable"]):
            throw .unavailable("\(environment.rawValue): Apple answered status \(answer.status), marked retryable")
        default:
            throw .failed(
                reason: RefusalReason.receiptInvalid, detail: "status \(answer.status) from verifyReceipt"
            )
        }
    }

    // MARK: - The purchase in the receipt

    private func purchase(
        in object: JSONValue,
        transactionID: String,
        productID: String,
        environment: PurchaseEnvironment
    ) throws(ReceiptError) -> VerifiedReceiptPurchase {
        guard let receipt = object["receipt"], receipt.objectMembers != nil else {
            throw Self.refusal(RefusalReason.receiptInvalid, "the answer has no receipt object")
        }
        guard let bundleID = receipt["bundle_id"]?.stringValue else {
            throw Self.refusal(RefusalReason.bundleMismatch, "the receipt names no bundle_id")
        }
        guard configuration.bundleIDs.contains(bundleID) else {
            throw Self.refusal(RefusalReason.bundleMismatch, "bundle_id is not one of the configured bundle IDs")
        }

        // Bounded: both arrays come from an answer of at most responseBytesMax bytes.
        let entries = Self.entries(receipt["in_app"]) + Self.entries(object["latest_receipt_info"])
        let matches = entries.filter { $0["transaction_id"]?.stringValue == transactionID }
        guard !matches.isEmpty else {
            throw Self.refusal(RefusalReason.transactionMismatch, "the receipt holds no purchase with this transaction ID")
        }
        var quantity: Int?
        for entry in matches {
            guard entry["product_id"]?.stringValue == productID else {
                throw Self.refusal(RefusalReason.productMismatch, "the receipt's purchase is for another product")
            }
            // Present at all, even as null, counts: a refund must not slip through.
            guard entry["cancellation_date"] == nil, entry["cancellation_date_ms"] == nil else {
                throw Self.refusal(RefusalReason.revoked, "Apple refunded or revoked the purchase")
            }
            // As for signed transactions, an absent quantity is one.
            guard let entryQuantity = entry["quantity"].map(Self.quantity) ?? 1 else {
                throw Self.refusal(RefusalReason.malformed, "the purchase's quantity is not an integer in 1...10")
            }
            guard quantity == nil || quantity == entryQuantity else {
                throw Self.refusal(RefusalReason.malformed, "the receipt lists the purchase with differing quantities")
            }
            quantity = entryQuantity
        }
        return VerifiedReceiptPurchase(
            transactionID: transactionID, productID: productID, quantity: quantity ?? 1, environment: environment
        )
    }

    private static func refusal(_ reason: RefusalReason, _ detail: String) -> ReceiptError {
        .failed(reason: reason, detail: detail)
    }

    /// The objects of an array; anything else in it is passed over.
    private static func entries(_ value: JSONValue?) -> [JSONValue] {
        value?.arrayValue?.filter { $0.objectMembers != nil } ?? []
    }

    /// Apple sends quantities as decimal strings ("1"); a JSON integer is
    /// read too. Either must lie in 1...10.
    static func quantity(_ value: JSONValue) -> Int? {
        let parsed: Int?
        if let text = value.stringValue {
            let isDecimal = (1...2).contains(text.utf8.count) && text.utf8.allSatisfy { (0x30...0x39).contains($0) }
            parsed = isDecimal ? Int(text) : nil
        } else {
            parsed = integer(value)
        }
        guard let parsed, CreditPolicy.quantityRange.contains(parsed) else { return nil }
        return parsed
    }

    /// A JSON number with an integral value (`2` or `2.0`, not `true`).
    static func integer(_ value: JSONValue?) -> Int? {
        guard let double = value?.doubleValue, double.rounded() == double, abs(double) < 1e15 else { return nil }
        return Int(double)
    }

    /// `is-retryable` is documented as a Boolean; some answers carry 1.
    private static func isRetryable(_ value: JSONValue?) -> Bool {
        value?.boolValue == true || value?.doubleValue == 1
    }
}

/// Why a receipt could not be turned into a verified purchase.
public enum ReceiptError: Error, Sendable, Equatable, CustomStringConvertible {
    /// Apple could not be asked, or did not give a usable answer: the caller
    /// may retry later. The text is for logs.
    case unavailable(String)
    /// Apple answered, and the receipt does not prove the purchase. `reason`
    /// is one of the `RefusalReason` codes; `detail` is safe to show.
    case failed(reason: RefusalReason, detail: String)

    public var description: String {
        switch self {
        case .unavailable(let detail): "unavailable: \(detail)"
        case .failed(let reason, let detail): "\(reason.rawValue): \(detail)"
        }
    }
}
