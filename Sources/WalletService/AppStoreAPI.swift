import AppStore
import Foundation
import HTTPServer
import JSON
import Logging
import WalletCore
import WalletStore

/// `POST /v1/appstore/notifications`: App Store Server Notifications V2.
/// No API key: the signed payload is the credential. Refunds and their
/// reversals go through the same SQL functions as the admin scripts.
struct AppStoreAPI: Sendable {
    let notifications: NotificationProcessor
    /// Where notifications are verified and applied, apart from the pool
    /// that asks Apple about receipts: junk here must not delay credits.
    let work: BlockingWork
    let metrics: Metrics
    let requestTimeoutSeconds: Int
    let logger: Logger

    func register(on router: Router) {
        router.add("POST", "/v1/appstore/notifications", postNotification)
    }

    struct NotificationBody: Decodable {
        var signedPayload: String
    }

    /// Parses on the server thread (cheap, bounded by the body limit), then
    /// verifies and applies on `work`, a bounded pool: the request carries no
    /// key, so anyone can send one, and a signature check or a database wait
    /// must not hold a server thread. A full pool answers 503 `overloaded`
    /// with `Retry-After`; Apple retries.
    func postNotification(_ request: Request, _ responder: Responder) {
        let signedPayload: String
        do {
            let json = try JSONBody.parse(request)
            guard case .string(let text)? = json["signedPayload"], !text.isEmpty else {
                throw WalletError.validationFailed([FieldError(field: "signedPayload", message: "is required: Apple's signed notification")])
            }
            signedPayload = text
        } catch {
            metrics.countNotification(.refused(.malformed))
            let kind = NotificationRefusals.Kind(reason: .malformed, appleSigned: false)
            if let refusals = notifications.refusals.refused(kind, requestID: request.requestID) {
                // Kept for the console off this thread, when there is room.
                _ = work.submit { [notifications] in
                    notifications.recordRefusal(kind, refusals: refusals, deadline: .now + .seconds(1))
                }
            }
            responder.fail(error)
            return
        }
        let deadline = ContinuousClock.now + .seconds(requestTimeoutSeconds)
        let requestID = request.requestID
        let queued = work.submit {
            do {
                // Waiting in the queue used up the request's time: Apple retries.
                guard ContinuousClock.now < deadline else {
                    metrics.countNotification(.failed(.overloaded))
                    throw WalletError.overloaded
                }
                responder.send(try process(signedPayload, requestID: requestID, deadline: deadline))
            } catch {
                responder.fail(error)
            }
        }
        if !queued {
            metrics.countNotification(.failed(.overloaded))
            logger.warning("notification refused: too much notification work queued", ["request.id": requestID])
            responder.fail(WalletError.overloaded)
        }
    }

    private func process(_ signedPayload: String, requestID: String,
                         deadline: ContinuousClock.Instant) throws -> Response {
        let processed = try notifications.process(signedPayload, requestID: requestID, deadline: deadline)
        return .json([
            "notification_uuid": .string(processed.notificationUUID),
            "notification_type": .string(processed.notificationType), "outcome": .string(processed.outcome.rawValue),
        ])
    }
}

/// Verifies and applies one signed notification: for the push route and
/// for reconciliation alike, so both treat a payload exactly the same way.
struct NotificationProcessor: Sendable {
    let ledger: Ledger
    let verifier: SignedDataVerifier
    let metrics: Metrics
    let readiness: Readiness?
    /// Whether a CONSUMPTION_REQUEST queues an answer to Apple.
    let queueConsumption: Bool
    /// What a refusal logs and keeps; shared with the route's own refusals.
    let refusals: NotificationRefusals
    let logger: Logger

    struct Processed: Sendable {
        var notificationUUID: String
        var notificationType: String
        var outcome: AppStoreNotificationOutcome
    }

    /// Throws `WalletError.verificationFailed` for a payload that does not
    /// verify, and the store's errors for the database.
    func process(_ signedPayload: String, requestID: String?, deadline: ContinuousClock.Instant) throws -> Processed {
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
    func recordRefusal(_ kind: NotificationRefusals.Kind, refusals: Int, deadline: ContinuousClock.Instant) {
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
