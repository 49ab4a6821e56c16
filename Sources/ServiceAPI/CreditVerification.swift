import AppStore
import Foundation
import GooglePlay
import Locking
import Logging
import WalletCore

/// Decides whether a credit request's purchase is real, by the kind of
/// evidence it carries:
/// - `signed_transaction`: an App Store signed transaction (`appstore-jws`),
///   verified offline against the configured roots;
/// - `receipt_data`: a StoreKit 1 receipt (`appstore-receipt`), checked with
///   Apple's verifyReceipt;
/// - `google_purchase_token`: a Google Play purchase (`googleplay`), looked
///   up with the Android Publisher API;
/// - none: Apple is asked about the bare flowNO (`appstore-api`) when that
///   mode is on, else the calling app backend vouches (`caller`).
/// The mode must be enabled, or the request fails with `mode_not_enabled`.
/// With a store's evidence, the flowNO must be the verified transaction's
/// (Google's is its orderId, so a Google request may leave it out) and the
/// quantity is the verified one.
struct CreditVerification: Sendable {
    struct Verified: Sendable, Equatable {
        var flowNo: FlowNumber
        var quantity: Quantity
        var source: CreditSource
        /// `Production` or `Sandbox` for App Store evidence, `Production`,
        /// `Test` or `Promo` for Google Play's; nil for the caller's word.
        var environment: PurchaseEnvironment?
        var purchaseToken: String?
    }

    let modes: Set<CreditSource>
    let transactions: SignedDataVerifier
    let policy: CreditPolicy
    let receipts: ReceiptVerifier
    /// Set when `appstore-api` is on.
    let serverAPI: ServerAPIClient?
    let lookups = TransactionLookups()
    /// The environments asked, in order: Production, then Sandbox when allowed.
    let apiEnvironments: [Environment]
    /// Set when `googleplay` is on.
    let googlePlay: GooglePlayCredits?
    /// What the lookups' minute is counted on.
    let clock: any WorkClock
    let logger: Logger

    /// `appleEnvironments` are the App Store environments accepted; a mode's
    /// client is kept only when that mode is on.
    init(modes: Set<CreditSource>, transactions: SignedDataVerifier, policy: CreditPolicy, receipts: ReceiptVerifier,
         serverAPI: ServerAPIClient?, apiEnvironments appleEnvironments: [Environment], googlePlay: GooglePlayCredits?,
         clock: any WorkClock, logger: Logger) {
        self.clock = clock
        self.googlePlay = modes.contains(.googlePlay) ? googlePlay : nil
        self.modes = modes
        self.serverAPI = modes.contains(.appStoreAPI) ? serverAPI : nil
        self.logger = logger
        apiEnvironments = [Environment.production, .sandbox].filter(appleEnvironments.contains)
        self.transactions = transactions
        self.policy = policy
        self.receipts = receipts
    }

    func mode(of body: CreditBody) -> CreditSource {
        if body.signedTransaction != nil { return .appStoreJWS }
        if body.receiptData != nil { return .appStoreReceipt }
        if body.googlePurchaseToken != nil { return .googlePlay }
        return modes.contains(.appStoreAPI) ? .appStoreAPI : .caller
    }

    /// True when verifying `body` waits on the network, so it must not run
    /// on a server thread.
    func blocks(_ body: CreditBody) -> Bool {
        [.appStoreReceipt, .appStoreAPI, .googlePlay].contains(mode(of: body))
    }

    func verify(_ body: CreditBody) throws -> Verified {
        let mode = mode(of: body)
        guard modes.contains(mode), mode != .appStoreNotification else {
            throw WalletError.verificationFailed(
                reason: .modeNotEnabled,
                detail: "credit verification mode \(mode.rawValue) is not enabled on this service")
        }
        // Only a Google request may leave the flowNO out (CreditBody checks).
        switch mode {
        case .caller, .appStoreNotification:
            return Verified(flowNo: try flowNo(body), quantity: body.quantity ?? .one, source: .caller, environment: nil)
        case .appStoreJWS:
            return try verifySignedTransaction(body.signedTransaction ?? "", body)
        case .appStoreReceipt:
            return try verifyReceipt(body.receiptData ?? "", body)
        case .appStoreAPI:
            return try verifyWithServerAPI(body)
        case .googlePlay:
            guard let googlePlay, let token = body.googlePurchaseToken else { throw WalletError.verificationUnavailable }
            let verified = try googlePlay.verify(token: token, userID: body.userID, productID: body.productID,
                                                 requestedFlowNo: body.flowNo, requestedQuantity: body.quantity)
            return Verified(flowNo: verified.flowNo, quantity: verified.quantity, source: .googlePlay,
                            environment: verified.environment, purchaseToken: token)
        }
    }

    private func flowNo(_ body: CreditBody) throws -> FlowNumber {
        guard let flowNo = body.flowNo else {
            throw WalletError.validationFailed([FieldError(field: "flow_no", message: "is required")])
        }
        return flowNo
    }

    /// Asks Get Transaction Info on Production, then on Sandbox after
    /// Apple's "transaction id not found" when Sandbox is allowed, and checks
    /// the signed transaction it returns like one the app sent.
    private func verifyWithServerAPI(_ body: CreditBody) throws -> Verified {
        guard let serverAPI else { throw WalletError.verificationUnavailable }
        let flowNo = try self.flowNo(body).rawValue
        switch lookups.admit(flowNo: flowNo, userID: body.userID.rawValue, now: clock.now) {
        case .ask: break
        case .knownNotFound: throw Self.transactionNotFound
        case .limited(let seconds): throw WalletError.rateLimited(retryAfterSeconds: seconds)
        }
        let deadline = serverAPI.deadline()
        for environment in apiEnvironments {
            do {
                let signed = try serverAPI.transactionInfo(flowNo, environment: environment, deadline: deadline)
                return try verifySignedTransaction(signed, body, source: .appStoreAPI)
            } catch let error as ServerAPIClient.APIError {
                if case .notFound(ServerAPIClient.transactionIDNotFound) = error { continue }
                logger.warning("the App Store Server API could not verify a flowNO",
                               ["appstore.environment": environment.rawValue, "error": error.description])
                throw WalletError.verificationUnavailable
            }
        }
        lookups.recordNotFound(flowNo: flowNo, userID: body.userID.rawValue, now: clock.now)
        throw Self.transactionNotFound
    }

    static let transactionNotFound = WalletError.verificationFailed(
        reason: .transactionNotFound, detail: "Apple knows no transaction with this flowNO in any accepted environment")

    private func verifySignedTransaction(_ jws: String, _ body: CreditBody,
                                         source: CreditSource = .appStoreJWS) throws -> Verified {
        let flowNo = try self.flowNo(body)
        do {
            let credit = try policy.credit(signedTransaction: jws, verifier: transactions, flowNo: flowNo,
                                           productID: body.productID, userID: body.userID,
                                           requestedQuantity: body.quantity)
            return Verified(flowNo: flowNo, quantity: credit.quantity, source: source, environment: credit.environment)
        } catch {
            throw WalletError.verificationFailed(reason: error.reason, detail: error.detail)
        }
    }

    private func verifyReceipt(_ receipt: String, _ body: CreditBody) throws -> Verified {
        let purchase: ReceiptVerifier.VerifiedReceiptPurchase
        let flowNo = try self.flowNo(body)
        do {
            purchase = try receipts.verify(receiptData: receipt, transactionID: flowNo.rawValue,
                                           productID: body.productID.rawValue)
        } catch {
            switch error {
            case .unavailable: throw WalletError.verificationUnavailable
            case .failed(let reason, let detail): throw WalletError.verificationFailed(reason: reason, detail: detail)
            }
        }
        do {
            let credit = try CreditPolicy.credit(receiptPurchase: purchase, requestedQuantity: body.quantity)
            return Verified(flowNo: flowNo, quantity: credit.quantity, source: .appStoreReceipt, environment: credit.environment)
        } catch {
            throw WalletError.verificationFailed(reason: error.reason, detail: error.detail)
        }
    }
}
