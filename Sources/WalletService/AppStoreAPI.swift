import AppStore
import Foundation
import HTTPServer
import Logging
import Postgres
import WalletCore

/// `POST /v1/appstore/notifications`: App Store Server Notifications V2.
/// No API key: the signed payload is the credential. Refunds and their
/// reversals go through the same SQL functions as the admin scripts.
struct AppStoreAPI: Sendable {
    let pool: ConnectionPool
    let verifier: SignedDataVerifier
    let metrics: Metrics
    let readiness: Readiness
    let requestTimeoutSeconds: Int
    let logger: Logger

    func register(on router: Router) {
        router.add("POST", "/v1/appstore/notifications", sync: postNotification)
    }

    struct NotificationBody: Decodable {
        var signedPayload: String
    }

    struct NotificationResponse: Codable {
        var notificationUUID: String
        var notificationType: String
        var outcome: String

        enum CodingKeys: String, CodingKey {
            case notificationUUID = "notification_uuid", notificationType = "notification_type", outcome
        }
    }

    func postNotification(_ request: Request) throws -> Response {
        let json = try JSONBody.parse(request)
        guard case .string(let signedPayload)? = json["signedPayload"], !signedPayload.isEmpty else {
            throw WalletError.validationFailed([FieldError(field: "signedPayload", message: "is required: Apple's signed notification")])
        }
        let notification: VerifiedNotification
        do {
            notification = try verifier.verifyNotification(signedPayload)
        } catch {
            logger.info("notification refused", ["request.id": request.requestID, "appstore.reason": error.reason.rawValue])
            throw WalletError.verificationFailed(reason: error.reason.rawValue, detail: error.detail)
        }
        guard readiness.isSchemaReady else { throw WalletError.databaseUnavailable }
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
        let outcome = try WalletAPI.read(pool: pool, metrics: metrics, timeoutSeconds: Double(requestTimeoutSeconds)) {
            try LedgerStore.applyNotification(record, on: $0)
        }
        logger.info("notification applied", ["request.id": request.requestID, "appstore.type": payload.notificationType,
                                              "appstore.outcome": outcome])
        return .json(NotificationResponse(notificationUUID: payload.notificationUUID,
                                          notificationType: payload.notificationType, outcome: outcome))
    }
}
