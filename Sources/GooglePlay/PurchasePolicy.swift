import Crypto
public import WalletCore

/// The rules for crediting a one-time Google Play purchase, applied to what
/// `purchases.products.get` answered for the request's purchase token. Pure:
/// no clock, no I/O.
///
/// The rules run in this order, and the first that fails decides the reason:
///
/// 0. The product: when Google's answer names a `productId`, it is the
///    Google Play id the purchase was looked up under, the catalog's for
///    the requested product (`product_mismatch`). A token of a cheaper
///    product must not buy a dearer one.
/// 1. The purchase state: 2 pending is `purchase_pending` (the buyer has not
///    paid yet; the request can come again), 1 canceled is `revoked`, and a
///    state Google does not document is `malformed`.
/// 2. The purchase type: absent is a normal purchase (`Production`), 0 a
///    license tester's (`Test`, only with `allowTestPurchases`, else
///    `environment_not_allowed`), 1 a promo code's (`Promo`), 2 a rewarded
///    ad's (`not_consumable`: nothing was paid), any other `malformed`.
/// 3. The quantity, read as 1 when absent, lies in 1...10
///    (`quantity_out_of_range`).
/// 4. The account binding (`account_mismatch`). An app that wants purchases
///    bound to the wallet user sets it when it launches the billing flow:
///
///        BillingFlowParams.newBuilder()
///            .setProductDetailsParamsList(...)
///            .setObfuscatedAccountId(sha256hex(userID))   // lowercase hex
///            .build()
///
///    Google returns that value as `obfuscatedExternalAccountId`. When
///    present it must equal `accountID(forUserID:)` (compared without regard
///    to letter case); with `requireAccountID` a purchase without one is
///    refused. The hash, not the user ID, goes to Google: Google blocks
///    purchases whose id carries personal data in clear text, and allows at
///    most 64 characters.
/// 5. The request: a stated flowNO must be the purchase's
///    (`flowNo(orderID:purchaseToken:)`), and a stated quantity the
///    purchase's (`transaction_mismatch`).
///
/// A consumed purchase (`consumptionState` 1) is not refused: the wallet
/// consumes only after crediting, so a retried request after a consume must
/// find the same flowNO and be answered from the ledger, not refused.
public struct PurchasePolicy: Sendable {
    /// The quantities a purchase may carry.
    public static let quantityRange = 1...10
    /// What a flowNO derived from a purchase token starts with; Google's
    /// order ids start with `GPA.`.
    public static let tokenFlowNoPrefix = "gp:"

    /// Whether license testers' purchases (`purchaseType` 0) are credited.
    public var allowTestPurchases: Bool
    /// Whether a purchase must carry `obfuscatedExternalAccountId` at all.
    public var requireAccountID: Bool

    public init(allowTestPurchases: Bool = false, requireAccountID: Bool = false) {
        self.allowTestPurchases = allowTestPurchases
        self.requireAccountID = requireAccountID
    }

    /// What to credit for an accepted purchase.
    public struct Accepted: Sendable, Equatable {
        public var flowNo: String
        public var quantity: Int
        /// `Production`, `Test` or `Promo`.
        public var environment: PurchaseEnvironment

        public init(flowNo: String, quantity: Int, environment: PurchaseEnvironment) {
            self.flowNo = flowNo
            self.quantity = quantity
            self.environment = environment
        }
    }

    /// The flowNO of a Google purchase: its `orderId`, or for a purchase
    /// without one (promo codes) `gp:` and the first 16 bytes of the
    /// SHA-256 of its purchase token in lowercase hex. The token itself is
    /// a bearer secret of the purchase and is never stored as the flowNO.
    public static func flowNo(orderID: String?, purchaseToken: String) -> String {
        if let orderID, !orderID.isEmpty { return orderID }
        return tokenFlowNoPrefix + hexString(SHA256.hash(Array(purchaseToken.utf8)).prefix(16))
    }

    /// The `obfuscatedExternalAccountId` an app should set for `userID`:
    /// the lowercase hex SHA-256 of its UTF-8 bytes (64 characters, Google's
    /// limit).
    public static func accountID(forUserID userID: String) -> String {
        SHA256.hex(Array(userID.utf8))
    }

    /// Checks a purchase against a credit request and returns what to credit.
    ///
    /// `productID` is the Google Play product id the purchase was looked up
    /// under.
    public func check(
        _ purchase: ProductPurchase,
        productID: String,
        purchaseToken: String,
        userID: String,
        requestedFlowNo: String?,
        requestedQuantity: Int?
    ) throws(PurchaseRefusal) -> Accepted {
        try check(purchase, productID: productID, purchaseToken: purchaseToken, boundTo: userID,
                  requestedFlowNo: requestedFlowNo, requestedQuantity: requestedQuantity)
    }

    /// Checks a purchase the store reported on its own, for a player whose
    /// `obfuscatedExternalAccountId` the wallet does not know yet: every
    /// check but the account binding (and no request to compare with).
    public func checkUnbound(_ purchase: ProductPurchase, productID: String,
                             purchaseToken: String) throws(PurchaseRefusal) -> Accepted {
        try check(purchase, productID: productID, purchaseToken: purchaseToken, boundTo: nil, requestedFlowNo: nil,
                  requestedQuantity: nil)
    }

    private func check(
        _ purchase: ProductPurchase,
        productID: String,
        purchaseToken: String,
        boundTo userID: String?,
        requestedFlowNo: String?,
        requestedQuantity: Int?
    ) throws(PurchaseRefusal) -> Accepted {
        if let named = purchase.productId, named != productID {
            throw PurchaseRefusal(.productMismatch,
                                  "Google Play says this purchase is of another product than the one requested")
        }
        switch purchase.purchaseState {
        case ProductPurchase.statePurchased: break
        case ProductPurchase.statePending:
            throw PurchaseRefusal(.purchasePending, "the purchase is pending: the buyer has not paid yet")
        case ProductPurchase.stateCanceled:
            throw PurchaseRefusal(.revoked, "Google Play canceled the purchase")
        default:
            throw PurchaseRefusal(.malformed, "purchaseState \(purchase.purchaseState) is not documented")
        }

        let environment: PurchaseEnvironment
        switch purchase.purchaseType {
        case nil:
            environment = .production
        case ProductPurchase.typeTest?:
            guard allowTestPurchases else {
                throw PurchaseRefusal(.environmentNotAllowed,
                                      "the purchase is a license tester's, and test purchases are not allowed")
            }
            environment = .test
        case ProductPurchase.typePromo?:
            environment = .promo
        case ProductPurchase.typeRewarded?:
            throw PurchaseRefusal(.notConsumable, "the purchase is a rewarded product: nothing was paid")
        case let other?:
            throw PurchaseRefusal(.malformed, "purchaseType \(other) is not documented")
        }

        let quantity = purchase.quantity ?? 1
        guard Self.quantityRange.contains(quantity) else {
            throw PurchaseRefusal(.quantityOutOfRange, "the purchase quantity \(quantity) is outside 1...10")
        }

        if let userID { try checkAccountID(purchase.obfuscatedExternalAccountId, userID: userID) }

        let flowNo = Self.flowNo(orderID: purchase.orderId, purchaseToken: purchaseToken)
        if let requestedFlowNo, requestedFlowNo != flowNo {
            throw PurchaseRefusal(.transactionMismatch, "flow_no is not this purchase's flowNO")
        }
        if let requestedQuantity, requestedQuantity != quantity {
            throw PurchaseRefusal(.transactionMismatch,
                                  "quantity \(requestedQuantity) differs from the purchase quantity \(quantity)")
        }
        return Accepted(flowNo: flowNo, quantity: quantity, environment: environment)
    }

    private func checkAccountID(_ accountID: String?, userID: String) throws(PurchaseRefusal) {
        guard let accountID else {
            if requireAccountID {
                throw PurchaseRefusal(.accountMismatch,
                                      "the purchase carries no obfuscatedExternalAccountId")
            }
            return
        }
        // `accountID(forUserID:)` is lowercase; an app may have sent uppercase hex.
        guard accountID.lowercased() == Self.accountID(forUserID: userID) else {
            throw PurchaseRefusal(.accountMismatch,
                                  "the purchase's obfuscatedExternalAccountId is not this user's")
        }
    }
}

/// A verified Google purchase that must not be credited for this request.
///
/// `reason` is a stable code, safe to return to clients and to count in
/// metrics, shared with the App Store's where they mean the same. `detail`
/// is a sentence that holds no token or user data.
public struct PurchaseRefusal: Error, Sendable, Equatable, CustomStringConvertible {
    /// Of Google's checks: `purchase_pending` (purchaseState 2, not paid
    /// yet), `revoked` (canceled, purchaseState 1), `not_consumable` (a
    /// rewarded product: nothing was paid), `environment_not_allowed` (a
    /// licence tester's, and tests are not allowed), `quantity_out_of_range`,
    /// `account_mismatch` (another user's `obfuscatedExternalAccountId`, or
    /// none where one is required), `transaction_mismatch` (the request's
    /// flowNO or quantity), `product_mismatch`, and `malformed` (a state or
    /// type Google does not document).
    public let reason: RefusalReason
    public let detail: String

    public init(_ reason: RefusalReason, _ detail: String) {
        self.reason = reason
        self.detail = detail
    }

    public var description: String {
        "\(reason.rawValue): \(detail)"
    }
}
