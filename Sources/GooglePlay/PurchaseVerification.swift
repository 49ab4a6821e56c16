public import WalletCore

/// What a credit records of a Google Play purchase Google vouched for: the
/// flowNO (Google's orderId, or one derived from the token), the quantity
/// and the environment.
public struct GooglePlayCredit: Sendable, Equatable {
    public var flowNo: FlowNumber
    public var quantity: Quantity
    /// `Production`, `Test` or `Promo`.
    public var environment: PurchaseEnvironment

    public init(flowNo: FlowNumber, quantity: Quantity, environment: PurchaseEnvironment) {
        self.flowNo = flowNo
        self.quantity = quantity
        self.environment = environment
    }
}

/// Why a purchase token is not credited: Google's answer refused by the
/// policy (or Google knows no such purchase), or Google not reachable.
public enum GooglePlayCreditError: Error, Sendable, Equatable {
    case refused(PurchaseRefusal)
    case unavailable(PlayAPIError)
}

extension PlayClient {
    /// Asks Google about `token` as a purchase of `googleProductID`
    /// (purchases.products.get) and checks the answer with `policy`.
    /// Google's 404 or 410, and its 400 for a token it cannot read at all,
    /// are `transaction_not_found`; any other failure to get an answer is
    /// `unavailable`, which says nothing of the purchase.
    public func credit(token: String, googleProductID: String, userID: UserID, requestedFlowNo: FlowNumber?,
                       requestedQuantity: Quantity?, policy: PurchasePolicy,
                       deadline: ContinuousClock.Instant) throws(GooglePlayCreditError) -> GooglePlayCredit {
        let purchase: ProductPurchase
        do {
            purchase = try productPurchase(productID: googleProductID, token: token, deadline: deadline)
        } catch {
            switch error {
            case .notFound, .refused(400, _):
                throw .refused(PurchaseRefusal(.transactionNotFound,
                                               "Google Play knows no purchase of this product with this token"))
            case .unavailable, .refused, .malformedAnswer:
                throw .unavailable(error)
            }
        }
        let accepted: PurchasePolicy.Accepted
        do {
            accepted = try policy.check(purchase, productID: googleProductID, purchaseToken: token, userID: userID.rawValue,
                                        requestedFlowNo: requestedFlowNo?.rawValue, requestedQuantity: requestedQuantity?.value)
        } catch {
            throw .refused(error)
        }
        guard let flowNo = FlowNumber(accepted.flowNo), let quantity = Quantity(accepted.quantity) else {
            throw .refused(PurchaseRefusal(.malformed, "Google's orderId or quantity is outside what a credit takes"))
        }
        return GooglePlayCredit(flowNo: flowNo, quantity: quantity, environment: accepted.environment)
    }
}
