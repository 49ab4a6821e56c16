public import WalletCore

/// What a credit records of an App Store purchase Apple vouched for: the
/// quantity Apple signed or verifyReceipt reported, and the environment.
public struct AppStoreCredit: Sendable, Equatable {
    public var quantity: Quantity
    /// `Production` or `Sandbox`.
    public var environment: PurchaseEnvironment

    public init(quantity: Quantity, environment: PurchaseEnvironment) {
        self.quantity = quantity
        self.environment = environment
    }
}

extension CreditPolicy {
    /// A signed transaction, sent by the app or returned by the App Store
    /// Server API, as a credit of `flowNo`: its signature and chain, then
    /// this policy's rules. A refusal carries its reason and a detail safe
    /// to show.
    public func credit(signedTransaction jws: String, verifier: SignedDataVerifier, flowNo: FlowNumber, productID: ProductID,
                       userID: UserID, requestedQuantity: Quantity?) throws(PolicyError) -> AppStoreCredit {
        let transaction: VerifiedTransaction
        do {
            transaction = try verifier.verifyTransaction(jws)
        } catch {
            throw PolicyError(error.reason.refusalReason, error.detail)
        }
        let quantity = try check(transaction.payload, flowNo: flowNo.rawValue, productID: productID.rawValue,
                                 userID: userID.rawValue, requestedQuantity: requestedQuantity?.value)
        guard let verifiedQuantity = Quantity(quantity) else {
            throw PolicyError(.malformed, "the signed quantity is out of range")
        }
        // The verifier takes only allowed environments, which are the App Store's own.
        guard let environment = PurchaseEnvironment(rawValue: transaction.payload.environment.rawValue) else {
            throw PolicyError(.environmentNotAllowed, "the signed transaction is from no environment a credit records")
        }
        return AppStoreCredit(quantity: verifiedQuantity, environment: environment)
    }

    /// A purchase verifyReceipt vouched for, as a credit: its quantity, which
    /// a request that states one must match.
    public static func credit(receiptPurchase purchase: ReceiptVerifier.VerifiedReceiptPurchase,
                              requestedQuantity: Quantity?) throws(PolicyError) -> AppStoreCredit {
        guard let quantity = Quantity(purchase.quantity) else {
            throw PolicyError(.malformed, "the receipt's quantity is out of range")
        }
        if let requestedQuantity, requestedQuantity != quantity {
            throw PolicyError(.transactionMismatch, "the request's quantity differs from the receipt's")
        }
        return AppStoreCredit(quantity: quantity, environment: purchase.environment)
    }
}
