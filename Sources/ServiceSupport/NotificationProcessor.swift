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
    package let logger: Logger

    package init(ledger: Ledger, verifier: SignedDataVerifier, metrics: Metrics, readiness: Readiness?,
                 queueConsumption: Bool, refusals: NotificationRefusals, logger: Logger) {
        self.ledger = ledger
        self.verifier = verifier
        self.metrics = metrics
        self.readiness = readiness
        self.queueConsumption = queueConsumption
        self.refusals = refusals
        self.logger = logger
    }

    package struct Processed: Sendable {
        package var notificationUUID: String
        package var notificationType: String
        package var outcome: AppStoreNotificationOutcome
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
        logger.info("notification applied", ["request.id": requestID ?? "reconcile", "appstore.type": payload.notificationType,
                                              "appstore.outcome": outcome.rawValue])
        return Processed(notificationUUID: payload.notificationUUID, notificationType: payload.notificationType,
                         outcome: outcome)
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
