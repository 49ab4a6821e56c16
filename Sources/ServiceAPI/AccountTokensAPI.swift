import AppStore
import GooglePlay
import HTTPServer
import JSON
import Logging
import ServiceSupport
import WalletCore
import WalletStore

/// The account tokens the app passes to the stores at purchase time, so a
/// purchase the store reports on its own names its player.
extension WalletAPI {
    /// `GET /v1/wallets/{user_id}/account-tokens` (scope `credit`): the
    /// values the credit checks compare, recorded before they are answered.
    func getAccountTokens(_ request: Request) throws -> Response {
        let userID = try pathUserID(request)
        let tokens = AccountTokens(userID: userID, apple: credits.policy.expectedAccountToken(userID: userID.rawValue),
                                   google: PurchasePolicy.accountID(forUserID: userID.rawValue))
        let deadline = deadline()
        try ledger.recordAccountTokens(tokens, deadline: deadline)
        try claimUnclaimedPurchases(carrying: tokens, deadline: deadline)
        return .json([
            "user_id": .string(userID.rawValue),
            "apple_app_account_token": tokens.apple.map(JSONValue.string) ?? .null,
            "google_obfuscated_account_id": .string(tokens.google),
        ])
    }

    /// Credits to the player the purchases the store reported with one of
    /// their tokens before the wallet had issued it (each leaves the
    /// unclaimed ones as its credit commits). One refused (revoked since,
    /// say) stays there; the rest are still credited.
    private func claimUnclaimedPurchases(carrying tokens: AccountTokens, deadline: ContinuousClock.Instant) throws {
        for purchase in try ledger.unclaimedPurchases(carrying: tokens, deadline: deadline) {
            let operation = purchase.credit(to: tokens.userID, client: "account-tokens")
            let result = try ledger.creditAndWait(operation, deadline: deadline)
            if result.outcome == .credited {
                metrics.countCoins(.credited, result.credit?.amount ?? 0)
                metrics.countCredit(.claim)
            }
            logger.info("unclaimed purchase claimed", ["flow_no": purchase.flowNo.rawValue,
                                                        "credit.outcome": result.outcome.rawValue])
        }
    }
}
