public import WalletCore

/// The rules for crediting a consumable purchase, applied to a transaction
/// that `SignedDataVerifier` has already verified. Pure: no clock, no I/O.
///
/// The rules run in this order, and the first that fails decides the reason:
///
/// 1. The transaction is for a `Consumable` product (`not_consumable`).
/// 2. It carries no revocation: no `revocationDate`, `revocationReason` or
///    `revocationType` (`revoked`).
/// 3. Its `transactionId` is the request's flowNO (`transaction_mismatch`).
/// 4. Its `productId` is the request's product (`product_mismatch`).
/// 5. Its `quantity`, read as 1 when absent, lies in 1...10 as Apple
///    documents (`malformed`: a signed payload outside Apple's own range is
///    not one we can reason about). If the request states a quantity too, it
///    must equal the signed one. A disagreement is reported as
///    `transaction_mismatch`, because the request then describes another
///    purchase than the one Apple signed; there is deliberately no separate
///    quantity code.
/// 6. The account token (`account_mismatch`): when the transaction carries an
///    `appAccountToken` and a namespace is configured, the token must equal
///    UUIDv5(namespace, user ID), compared without regard to letter case.
///    With `requireAccountToken` a transaction without a token is refused.
public struct CreditPolicy: Sendable {
    /// The quantities Apple allows in one purchase.
    public static let quantityRange = 1...10

    /// The UUID namespace of account tokens; nil does not compare tokens.
    /// Configuration should check at start-up that it is a UUID: a value
    /// that is not makes every token comparison fail closed.
    public var accountTokenNamespace: String?
    /// Whether a transaction must carry an `appAccountToken` at all.
    public var requireAccountToken: Bool

    public init(accountTokenNamespace: String? = nil, requireAccountToken: Bool = false) {
        self.accountTokenNamespace = accountTokenNamespace
        self.requireAccountToken = requireAccountToken
    }

    /// The `appAccountToken` the app should attach to purchases by `userID`,
    /// or nil if no namespace is configured or it is not a UUID.
    public func expectedAccountToken(userID: String) -> String? {
        accountTokenNamespace.flatMap { NameBasedUUID.v5(namespace: $0, name: userID) }
    }

    /// Checks a verified transaction against a credit request and returns
    /// the quantity to credit, as Apple signed it.
    public func check(
        _ transaction: VerifiedTransaction,
        flowNo: String,
        productID: String,
        userID: String,
        requestedQuantity: Int?
    ) throws(PolicyError) -> Int {
        try check(
            transaction.payload, flowNo: flowNo, productID: productID, userID: userID,
            requestedQuantity: requestedQuantity
        )
    }

    /// Checks a transaction payload against a credit request and returns the
    /// quantity to credit. The payload must come from a verified token.
    public func check(
        _ transaction: TransactionPayload,
        flowNo: String,
        productID: String,
        userID: String,
        requestedQuantity: Int?
    ) throws(PolicyError) -> Int {
        guard transaction.type == .consumable else {
            throw PolicyError(RefusalReason.notConsumable, "the transaction is not for a consumable product")
        }
        guard transaction.revocationDate == nil, transaction.revocationReason == nil,
              transaction.revocationType == nil
        else {
            throw PolicyError(RefusalReason.revoked, "the App Store refunded or revoked the transaction")
        }
        guard transaction.transactionId == flowNo else {
            throw PolicyError(RefusalReason.transactionMismatch, "flow_no is not the signed transaction's transactionId")
        }
        guard transaction.productId == productID else {
            throw PolicyError(RefusalReason.productMismatch, "product_id is not the signed transaction's productId")
        }
        let quantity = transaction.quantity ?? 1
        guard Self.quantityRange.contains(quantity) else {
            throw PolicyError(RefusalReason.malformed, "the signed quantity \(quantity) is outside 1...10")
        }
        if let requestedQuantity, requestedQuantity != quantity {
            throw PolicyError(
                RefusalReason.transactionMismatch,
                "quantity \(requestedQuantity) differs from the signed quantity \(quantity)"
            )
        }
        try checkAccountToken(transaction.appAccountToken, userID: userID)
        return quantity
    }

    private func checkAccountToken(_ token: String?, userID: String) throws(PolicyError) {
        guard let token else {
            if requireAccountToken {
                throw PolicyError(RefusalReason.accountMismatch, "the transaction carries no appAccountToken")
            }
            return
        }
        guard let namespace = accountTokenNamespace else { return }
        guard let expected = NameBasedUUID.v5(namespace: namespace, name: userID) else {
            throw PolicyError(
                RefusalReason.accountMismatch, "the configured account token namespace is not a UUID"
            )
        }
        // `expected` is lowercase; Apple echoes what the app sent, in any case.
        guard token.lowercased() == expected else {
            throw PolicyError(RefusalReason.accountMismatch, "the transaction's appAccountToken is not this user's")
        }
    }
}

/// A verified transaction that must not be credited for this request.
///
/// `reason` is one of the `RefusalReason` codes; `detail` is a sentence that
/// is safe to show and holds no token or user data.
public struct PolicyError: Error, Sendable, Equatable, CustomStringConvertible {
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
