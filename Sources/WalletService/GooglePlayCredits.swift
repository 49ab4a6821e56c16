import Foundation
import GooglePlay
import Logging
import WalletCore
import WalletStore

/// Checks a Google Play purchase token with the Android Publisher API
/// (purchases.products.get) and decides what it may be credited as: the
/// flowNO (Google's orderId, or one derived from the token), the quantity
/// and the environment. The purchase's product is the catalog's Google
/// Play id for the requested product, which must name that product alone
/// (a Google id two active products share cannot tell which one was
/// bought), and Google's answer must be about that id. Runs off the server
/// threads: it waits on Google.
struct GooglePlayCredits: Sendable {
    let client: PlayClient
    let policy: PurchasePolicy
    let ledger: Ledger
    let logger: Logger

    struct Verified: Sendable, Equatable {
        var flowNo: FlowNumber
        var quantity: Quantity
        var environment: PurchaseEnvironment
    }

    func verify(token: String, userID: UserID, productID: ProductID, requestedFlowNo: FlowNumber?,
                requestedQuantity: Quantity?) throws -> Verified {
        let deadline = client.deadline()
        guard let product = try ledger.googlePlayProduct(of: productID, deadline: deadline) else {
            throw WalletError.unknownProduct(productID.rawValue)
        }
        let googleProductID = product.googleProductID
        guard product.activeProducts == 1 else {
            logger.warning("a Google Play product id names more than one active product; its credits are refused",
                           ["googleplay.product": googleProductID])
            throw WalletError.verificationFailed(
                reason: .productMismatch,
                detail: "the catalog gives this product's Google Play id to more than one active product")
        }
        let purchase: ProductPurchase
        do {
            purchase = try client.productPurchase(productID: googleProductID, token: token, deadline: deadline)
        } catch {
            switch error {
            case .notFound, .refused(400, _):
                // Google answers 400 for a token it cannot read at all.
                throw WalletError.verificationFailed(
                    reason: .transactionNotFound, detail: "Google Play knows no purchase of this product with this token")
            case .unavailable, .refused, .malformedAnswer:
                logger.warning("Google Play could not verify a purchase", ["error": error.description])
                throw WalletError.verificationUnavailable
            }
        }
        let accepted: PurchasePolicy.Accepted
        do {
            accepted = try policy.check(purchase, productID: googleProductID, purchaseToken: token, userID: userID.rawValue,
                                        requestedFlowNo: requestedFlowNo?.rawValue,
                                        requestedQuantity: requestedQuantity?.value)
        } catch {
            if error.reason == .purchasePending { throw WalletError.purchasePending }
            throw WalletError.verificationFailed(reason: error.reason, detail: error.detail)
        }
        guard let flowNo = FlowNumber(accepted.flowNo), let quantity = Quantity(accepted.quantity) else {
            throw WalletError.verificationFailed(reason: .malformed,
                                                 detail: "Google's orderId or quantity is outside what a credit takes")
        }
        return Verified(flowNo: flowNo, quantity: quantity, environment: accepted.environment)
    }
}
