/// Stable codes for why a purchase is not credited, shared by `CreditPolicy`
/// and `ReceiptVerifier`. Like `VerificationFailure`'s raw values, with which
/// they share `malformed`, `bundle_mismatch` and `environment_not_allowed`,
/// they are safe to return to clients and to count in metrics.
public enum RefusalReason {
    /// The transaction is not for a consumable product.
    public static let notConsumable = "not_consumable"
    /// The App Store refunded or revoked the transaction.
    public static let revoked = "revoked"
    /// The evidence is for another transaction than the request's flowNO, or
    /// for another quantity than the request's.
    public static let transactionMismatch = "transaction_mismatch"
    /// The transaction is for another product than the request's.
    public static let productMismatch = "product_mismatch"
    /// The transaction's `appAccountToken` does not belong to the user, or
    /// is missing where one is required.
    public static let accountMismatch = "account_mismatch"
    /// Apple's answer breaks Apple's own documented shape, such as a
    /// quantity outside 1...10.
    public static let malformed = VerificationFailure.malformed.rawValue
    /// The receipt is for another app.
    public static let bundleMismatch = VerificationFailure.bundle_mismatch.rawValue
    /// The receipt is from the sandbox, and the sandbox is not allowed.
    public static let environmentNotAllowed = VerificationFailure.environment_not_allowed.rawValue
    /// Apple's verifyReceipt refused the receipt with a non-zero status.
    public static let receiptInvalid = "receipt_invalid"
}
