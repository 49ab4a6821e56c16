package import AppStore
import Foundation
package import Logging
import WalletCore
package import WalletStore

/// Verifies and applies one signed notification: for the push route and
/// for reconciliation alike, so both treat a payload exactly the same way.
package struct NotificationProcessor: Sendable {
    package let ledger: Ledger
    package let verifier: SignedDataVerifier
    package let metrics: Metrics
    package let readiness: Readiness?
    /// Whether a CONSUMPTION_REQUEST queues an answer to Apple.
    package let queueConsumption: Bool
    /// What a refusal logs and keeps; shared with the route's own refusals.
    package let refusals: NotificationRefusals
    /// The policy a ONE_TIME_CHARGE is credited under, the one the app's
    /// own calls are checked by; nil records charges only
    /// (WALLET_CREDIT_FROM_NOTIFICATIONS=false).
    package let charges: CreditPolicy?
    package let logger: Logger

    package init(ledger: Ledger, verifier: SignedDataVerifier, metrics: Metrics, readiness: Readiness?,
                 queueConsumption: Bool, refusals: NotificationRefusals, charges: CreditPolicy?, logger: Logger) {
        self.ledger = ledger
        self.verifier = verifier
        self.metrics = metrics
        self.readiness = readiness
        self.queueConsumption = queueConsumption
        self.refusals = refusals
        self.charges = charges
        self.logger = logger
    }

    package struct Processed: Sendable {
        package var notificationUUID: String
        package var notificationType: String
        package var outcome: AppStoreNotificationOutcome
        /// For a ONE_TIME_CHARGE: what became of the purchase.
        package var charge: ChargeOutcome?
    }

    /// What a ONE_TIME_CHARGE did.
    package enum ChargeOutcome: Sendable, Equatable {
        /// Credited to the player its token names now, or before (by this
        /// notification's earlier delivery, or the app's call).
        case credited, replayed
        /// No token, or one the wallet never issued: kept as unclaimed.
        case unclaimed
        /// Not credited, for this reason (a consumable refused by the
        /// credit policy or the ledger); the notification is kept.
        case refused(String)
        /// Not a consumable: nothing to credit.
        case ignored

        package var text: String {
            switch self {
            case .credited: "credited"
            case .replayed: "replayed"
            case .unclaimed: "unclaimed"
            case .refused(let reason): "refused:\(reason)"
            case .ignored: "ignored"
            }
        }
    }

    /// Throws `WalletError.verificationFailed` for a payload that does not
    /// verify, and the store's errors for the database.
    package func process(_ signedPayload: String, requestID: String?, deadline: ContinuousClock.Instant) throws -> Processed {
        let notification: VerifiedNotification
        do {
            notification = try verifier.verifyNotification(signedPayload)
        } catch {
            metrics.countNotification(.refused(error.reason))
            let kind = NotificationRefusals.Kind(reason: error.reason, appleSigned: error.isAppleSigned)
            if let refusals = refusals.refused(kind, requestID: requestID) {
                recordRefusal(kind, refusals: refusals, deadline: min(deadline, .now + .seconds(1)))
            }
            throw WalletError.verificationFailed(reason: error.reason.refusalReason, detail: error.detail)
        }
        if let readiness, !readiness.isSchemaReady {
            metrics.countNotification(.failed(.error))
            throw WalletError.databaseUnavailable
        }
        let payload = notification.payload
        let transaction = notification.transaction?.payload
        let record = LedgerStore.NotificationRecord(
            notificationUUID: payload.notificationUUID, notificationType: payload.notificationType,
            subtype: payload.subtype,
            environment: (payload.data?.environment ?? payload.summary?.environment)?.rawValue ?? "unknown",
            signedDateMilliseconds: payload.signedDate, flowNo: transaction?.transactionId,
            productType: transaction?.type.rawValue, revocationType: transaction?.revocationType,
            revocationPercentage: transaction.flatMap { $0.revocationPercentage.map(Int64.init) },
            payloadJSON: String(decoding: notification.payloadJSON, as: UTF8.self))
        let applied: LedgerStore.NotificationApplied
        do {
            // By the caller's deadline: a queue and the signature checks may
            // have used part of its time already.
            applied = try ledger.applyNotification(record, queueConsumption: queueConsumption, deadline: deadline)
            metrics.countCoins(.refunded, applied.refundedCoins)
        } catch {
            metrics.countNotification(.failed(.error))
            throw error
        }
        let outcome = applied.outcome
        metrics.countNotification(.applied(outcome))
        if applied.consumptionQueued {
            metrics.countConsumption(.queued)
        }
        // A charge is credited whatever the notification's outcome: a
        // redelivery (a duplicate) after a failure still credits, once.
        var charge: ChargeOutcome?
        if payload.notificationType == "ONE_TIME_CHARGE", let charges, let transaction {
            charge = try credit(transaction, policy: charges, path: requestID == nil ? .sweep : .notification,
                                deadline: deadline)
        }
        logger.info("notification applied", ["request.id": requestID ?? "reconcile", "appstore.type": payload.notificationType,
                                              "appstore.outcome": outcome.rawValue, "appstore.charge": charge?.text ?? "-"])
        return Processed(notificationUUID: payload.notificationUUID, notificationType: payload.notificationType,
                         outcome: outcome, charge: charge)
    }

    /// Credits a ONE_TIME_CHARGE's consumable to the player its
    /// `appAccountToken` names, under its transactionId as the flowNO (so
    /// the app's own call for it replays this credit, and this one replays
    /// the app's), or keeps it as unclaimed when no player is named.
    private func credit(_ transaction: TransactionPayload, policy: CreditPolicy, path: Metrics.CreditPath,
                        deadline: ContinuousClock.Instant) throws -> ChargeOutcome {
        guard transaction.type == .consumable else { return .ignored }
        guard let flowNo = FlowNumber(transaction.transactionId), let productID = ProductID(transaction.productId),
              let environment = PurchaseEnvironment(rawValue: transaction.environment.rawValue) else {
            return .refused(RefusalReason.malformed.rawValue)
        }
        let owner = try transaction.appAccountToken.flatMap {
            try ledger.accountTokenOwner(.apple, token: $0, deadline: deadline)
        }
        // The same checks as the app's call, the player's token aside.
        let checked: Int
        do {
            checked = try (owner == nil ? CreditPolicy() : policy).check(
                transaction, flowNo: flowNo.rawValue, productID: productID.rawValue, userID: owner?.rawValue ?? "",
                requestedQuantity: nil)
        } catch {
            return .refused(error.reason.rawValue)
        }
        guard let quantity = Quantity(checked) else { return .refused(RefusalReason.malformed.rawValue) }
        guard let owner else {
            try ledger.keepUnclaimed(UnclaimedPurchase(store: .apple, flowNo: flowNo, productID: productID, quantity: quantity,
                                                       environment: environment, accountToken: transaction.appAccountToken),
                                     deadline: deadline)
            return .unclaimed
        }
        let operation = LedgerStore.CreditOperation(
            client: "appstore-notification", flowNo: flowNo, userID: owner, productID: productID, quantity: quantity,
            claimedAmount: nil, source: .appStoreNotification, environment: environment)
        let result = try ledger.creditAndWait(operation, deadline: deadline)
        switch result.outcome {
        case .credited:
            metrics.countCoins(.credited, result.credit?.amount ?? 0)
            metrics.countCredit(path)
            return .credited
        case .replayed:
            return .replayed
        default:
            return .refused(result.outcome.rawValue)
        }
    }

    /// Keeps a row for the console that stands for `refusals` refusals of
    /// `kind` (the newest 10,000 of each kind, Apple-signed or not, are
    /// kept). Best effort and bounded: the refusal's answer does not wait on
    /// more than `deadline`, and a database that cannot take it is logged.
    package func recordRefusal(_ kind: NotificationRefusals.Kind, refusals: Int, deadline: ContinuousClock.Instant) {
        guard readiness?.isSchemaReady ?? true else { return }
        do {
            try ledger.recordRefusedNotification(reason: kind.reason.refusalReason, appleSigned: kind.appleSigned,
                                                 refusals: refusals, deadline: deadline)
        } catch {
            logger.warning("refused notification not recorded", ["appstore.reason": kind.reason.rawValue,
                                                                 "error": String(reflecting: error)])
        }
    }
}
