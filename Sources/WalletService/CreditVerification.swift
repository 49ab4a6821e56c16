import WalletCore

/// Decides whether a credit request's purchase is real, by the kind of
/// evidence it carries:
/// - `signed_transaction`: an App Store signed transaction (`appstore-jws`);
/// - `receipt_data`: a StoreKit 1 receipt (`appstore-receipt`);
/// - neither: the calling app backend vouches (`caller`).
/// The mode must be enabled, or the request fails with `mode_not_enabled`.
struct CreditVerification: Sendable {
    struct Verified: Sendable, Equatable {
        var quantity: Quantity
        var source: Configuration.CreditVerification
        /// `Production` or `Sandbox` for App Store evidence; nil for the caller's word.
        var environment: String?
    }

    let modes: Set<Configuration.CreditVerification>

    func verify(_ body: CreditBody) throws -> Verified {
        let mode: Configuration.CreditVerification =
            body.signedTransaction != nil ? .appStoreJWS : body.receiptData != nil ? .appStoreReceipt : .caller
        guard modes.contains(mode) else {
            throw WalletError.verificationFailed(
                reason: "mode_not_enabled",
                detail: "credit verification mode \(mode.rawValue) is not enabled on this service")
        }
        switch mode {
        case .caller:
            return Verified(quantity: body.quantity ?? .one, source: .caller, environment: nil)
        case .appStoreJWS, .appStoreReceipt:
            throw WalletError.verificationFailed(reason: "mode_not_enabled",
                                                 detail: "App Store verification is not available in this build")
        }
    }
}
