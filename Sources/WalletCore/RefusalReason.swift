/// Why a store's evidence did not hold: the `reason` of a
/// `verification_failed` answer, the refusals the App Store notification
/// metrics count, and the reason kept for a refused notification. Stable
/// codes, safe to return to clients and to count in metrics; both stores'
/// checks share the codes that mean the same.
public enum RefusalReason: String, Sendable, CaseIterable {
    /// Not of the documented shape: a JWS's segments or fields, a store's
    /// answer that breaks its own documentation (a quantity outside 1...10,
    /// an undocumented state).
    case malformed
    /// A JWS header's `alg` is not exactly `ES256`.
    case badAlgorithm = "bad_algorithm"
    /// A JWS's x5c chain is broken or invalid at its `signedDate`.
    case badChain = "bad_chain"
    /// A JWS's chain does not lead to a configured root.
    case untrustedRoot = "untrusted_root"
    /// A JWS's leaf or intermediate lacks Apple's marker extension.
    case missingAppleOID = "missing_apple_oid"
    /// A JWS's signature does not verify with its leaf's key.
    case badSignature = "bad_signature"
    /// For another bundle, or (notifications) another app Apple ID.
    case bundleMismatch = "bundle_mismatch"
    /// From an environment that is not allowed.
    case environmentNotAllowed = "environment_not_allowed"
    /// Not a consumable product (a Google rewarded product: nothing was paid).
    case notConsumable = "not_consumable"
    /// The store refunded, revoked or canceled the purchase.
    case revoked
    /// Another transaction than the request's flowNO, or another quantity.
    case transactionMismatch = "transaction_mismatch"
    /// Another product than the request's, or a catalog that cannot tell
    /// which of its products a Google Play id is.
    case productMismatch = "product_mismatch"
    /// The purchase's account binding is another user's, or missing where
    /// one is required.
    case accountMismatch = "account_mismatch"
    /// Apple's verifyReceipt refused the receipt.
    case receiptInvalid = "receipt_invalid"
    /// The store knows no such purchase.
    case transactionNotFound = "transaction_not_found"
    /// The request's kind of evidence is not enabled on this service.
    case modeNotEnabled = "mode_not_enabled"
    /// A Google Play purchase's quantity lies outside 1...10.
    case quantityOutOfRange = "quantity_out_of_range"
    /// A Google Play purchase is pending, not paid yet (answered
    /// `purchase_pending`, not as a refusal).
    case purchasePending = "purchase_pending"
}
