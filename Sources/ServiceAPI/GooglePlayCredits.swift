import Foundation
import GooglePlay
import Logging
import WalletCore
import WalletStore

/// A Google Play purchase token as a credit: the catalog's Google Play id
/// for the requested product, which must name that product alone (a Google
/// id two active products share cannot tell which one was bought), then
/// Google's word on the token under that id, as `PlayClient.credit` and
/// the purchase policy decide it. Runs off the server threads: it waits on
/// Google.
struct GooglePlayCredits: Sendable {
    let client: PlayClient
    let policy: PurchasePolicy
    let ledger: Ledger
    let logger: Logger

    func verify(token: String, userID: UserID, productID: ProductID, requestedFlowNo: FlowNumber?,
                requestedQuantity: Quantity?) throws -> GooglePlayCredit {
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
        let credit: GooglePlayCredit
        do {
            credit = try client.credit(token: token, googleProductID: googleProductID, userID: userID,
                                       requestedFlowNo: requestedFlowNo, requestedQuantity: requestedQuantity, policy: policy,
                                       deadline: deadline)
        } catch {
            switch error {
            case .refused(let refusal) where refusal.reason == .purchasePending:
                throw WalletError.purchasePending
            case .refused(let refusal):
                throw WalletError.verificationFailed(reason: refusal.reason, detail: refusal.detail)
            case .unavailable(let failure):
                logger.warning("Google Play could not verify a purchase", ["error": failure.description])
                throw WalletError.verificationUnavailable
            }
        }
        return credit
    }
}
