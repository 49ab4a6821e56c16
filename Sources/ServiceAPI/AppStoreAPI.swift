import AppStore
import Foundation
import HTTPServer
import JSON
import Logging
import ServiceSupport
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
        var members: [(key: String, value: JSONValue)] = [
            ("notification_uuid", .string(processed.notificationUUID)),
            ("notification_type", .string(processed.notificationType)), ("outcome", .string(processed.outcome.rawValue)),
        ]
        // A ONE_TIME_CHARGE also says what became of the purchase.
        if let charge = processed.charge { members.append(("charge", .string(charge.text))) }
        return .json(.object(members))
    }
}
