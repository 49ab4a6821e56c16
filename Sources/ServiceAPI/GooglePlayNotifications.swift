import Foundation
import GooglePlay
import HTTPServer
import Logging
import ServiceSupport
import WalletCore
import WalletStore

/// Where Pub/Sub pushes Google Play's notifications: the route, and so what
/// a push subscription's endpoint ends in.
package let googlePlayNotificationsPath = "/v1/googleplay/notifications"

/// `POST /v1/googleplay/notifications`: Google Play's real-time developer
/// notifications, pushed by a Pub/Sub push subscription with an OIDC token.
///
/// Pub/Sub retries every answer that is not 2xx, so anything settled is
/// 204: processed, a duplicate (by messageId), or ignored (another app's
/// package). A bad token is 401 and a malformed body 400; Google's keys or
/// API unreachable, or the ledger, 503, so the push comes again.
///
/// A push is a hint: the OIDC token says Pub/Sub sent it, not what it says,
/// so anyone holding one token could name any purchase token in a body. A
/// pushed void is applied only as Google confirms it (`confirmedVoids`);
/// until then it is 503 `void_not_confirmed`, and nothing is recorded, so
/// Pub/Sub's retry is not a duplicate. The sweep finds it too. The work
/// (fetching Google's keys, asking Google, the database) runs on threads of
/// its own, never on a server thread, and never on the App Store's: a push
/// whose key is being fetched from Google waits there, and a full queue
/// answers the push 503, which Pub/Sub retries.
struct GooglePlayNotificationsAPI: Sendable {
    let authenticator: PushAuthenticator?
    let voids: GooglePlayVoids?
    let packageName: String?
    /// The policy a ONE_TIME_PRODUCT_PURCHASED is credited under (the
    /// app's calls' own); nil records it only.
    let purchases: PurchasePolicy?
    /// Present when the route is set up.
    let work: BlockingWork?
    let metrics: Metrics
    let requestTimeoutSeconds: Int
    let logger: Logger

    func register(on router: Router) {
        router.add("POST", googlePlayNotificationsPath, postNotification)
    }

    func postNotification(_ request: Request, _ responder: Responder) {
        guard let authenticator, let voids, let packageName, let work else {
            return responder.fail(WalletError.notFound(detail: "Google Play notifications are not set up on this service"))
        }
        let deadline = ContinuousClock.now + .seconds(requestTimeoutSeconds)
        let queued = work.submit {
            do {
                guard ContinuousClock.now < deadline else { throw WalletError.overloaded }
                responder.send(try process(request, authenticator: authenticator, voids: voids, packageName: packageName,
                                           deadline: deadline))
            } catch {
                if case WalletError.overloaded = error { metrics.countGooglePlayNotification(.notApplied(.overloaded)) }
                responder.fail(error)
            }
        }
        if !queued {
            metrics.countGooglePlayNotification(.notApplied(.overloaded))
            responder.fail(WalletError.overloaded)
        }
    }

    private func process(_ request: Request, authenticator: PushAuthenticator, voids: GooglePlayVoids, packageName: String,
                         deadline: ContinuousClock.Instant) throws -> Response {
        do {
            _ = try authenticator.verify(authorization: request.headers["authorization"])
        } catch {
            if error.isRetryable {
                logger.warning("Google's push keys could not be read", ["error": error.description])
                metrics.countGooglePlayNotification(.notApplied(.error))
                throw WalletError.verificationUnavailable
            }
            metrics.countGooglePlayNotification(.notApplied(.unauthorized))
            logger.warning("Google Play notification refused", ["request.id": request.requestID,
                                                                "googleplay.reason": error.reason.rawValue])
            throw GooglePlayPushError.unauthorized(reason: error.reason)
        }
        let message: PushMessage
        do {
            message = try PushMessage.parse(request.body)
        } catch {
            metrics.countGooglePlayNotification(.notApplied(.malformed))
            throw GooglePlayPushError.malformed(detail: error.description)
        }
        let notification = message.notification
        guard notification.packageName == packageName else {
            metrics.countGooglePlayNotification(.notApplied(.ignored))
            logger.warning("Google Play notification for another package ignored",
                           ["request.id": request.requestID, "googleplay.package": notification.packageName])
            return Response(status: 204)
        }
        let eventMilliseconds = Int64((notification.eventTime.timeIntervalSince1970 * 1000).rounded())
        var record = GooglePlayNotificationRecord(
            messageID: message.messageID, kind: notification.kindName, packageName: notification.packageName,
            eventTimeMilliseconds: eventMilliseconds, purchaseToken: nil, orderID: nil, flowNo: nil,
            payloadJSON: String(decoding: message.data, as: UTF8.self), voids: nil)
        switch notification.kind {
        case .voidedPurchase(let token, let orderID, let productType, let refundType):
            record.purchaseToken = token
            record.orderID = orderID
            if productType == 2 {
                let confirmed = try confirmedVoids(token: token, refundType: refundType, eventTime: notification.eventTime,
                                                   voids: voids, requestID: request.requestID, deadline: deadline)
                record.flowNo = confirmed.flowNo
                record.voids = confirmed.voids
            }
        case .oneTimeProduct(_, let token, _):
            record.purchaseToken = token
        case .subscription, .test, .other:
            break
        }
        let applied: GooglePlayApplied<GooglePlayNotificationOutcome>
        do {
            applied = try voids.ledger.applyGooglePlayNotification(record, deadline: deadline)
        } catch {
            metrics.countGooglePlayNotification(.notApplied(.error))
            throw error
        }
        if record.voids != nil { voids.count(applied) }
        metrics.countGooglePlayNotification(.applied(applied.outcome))
        // A purchase is credited whatever the notification's outcome: a
        // redelivery (a duplicate) after a failure still credits, once.
        var charge = "-"
        if case .oneTimeProduct(let type, let token, let sku) = notification.kind,
           type == Self.oneTimeProductPurchased, let purchases, let sku {
            charge = try credit(token: token, googleProductID: sku, policy: purchases, voids: voids, deadline: deadline)
        }
        logger.info("Google Play notification applied", ["request.id": request.requestID, "googleplay.kind": record.kind.rawValue,
                                                         "googleplay.outcome": applied.outcome.rawValue,
                                                         "googleplay.charge": charge])
        return Response(status: 204)
    }

    /// `oneTimeProductNotification.notificationType` of a purchase made.
    static let oneTimeProductPurchased = 1

    /// Credits a one-time purchase Google reported on its own: read from
    /// Google (`purchases.products.get`), checked by the app's calls'
    /// policy, and credited once per token (and consumed) to the player its
    /// `obfuscatedExternalAccountId` names, or kept as unclaimed when it
    /// names none the wallet knows. Returns what became of it, for the log;
    /// throws only what Pub/Sub should retry (Google or the ledger away).
    private func credit(token: String, googleProductID: String, policy: PurchasePolicy, voids: GooglePlayVoids,
                        deadline: ContinuousClock.Instant) throws -> String {
        let ledger = voids.ledger
        guard let productID = try ledger.catalogProduct(googleProductID: googleProductID, deadline: deadline) else {
            return "refused:unknown_product"
        }
        let purchase: ProductPurchase
        do {
            purchase = try voids.client.productPurchase(productID: googleProductID, token: token,
                                                        deadline: voids.client.deadline())
        } catch {
            switch error {
            case .notFound, .refused:
                return "refused:not_found"
            case .unavailable, .malformedAnswer:
                logger.warning("Google Play could not be asked about a pushed purchase", ["error": error.description])
                throw WalletError.verificationUnavailable
            }
        }
        let owner = try purchase.obfuscatedExternalAccountId.flatMap {
            try ledger.accountTokenOwner(.google, token: $0, deadline: deadline)
        }
        let accepted: PurchasePolicy.Accepted
        do throws(PurchaseRefusal) {
            if let owner {
                accepted = try policy.check(purchase, productID: googleProductID, purchaseToken: token, userID: owner.rawValue,
                                            requestedFlowNo: nil, requestedQuantity: nil)
            } else {
                accepted = try policy.checkUnbound(purchase, productID: googleProductID, purchaseToken: token)
            }
        } catch {
            return "refused:\(error.reason.rawValue)"
        }
        guard let flowNo = FlowNumber(accepted.flowNo), let quantity = Quantity(accepted.quantity) else {
            return "refused:malformed"
        }
        let purchaseCredit = UnclaimedPurchase(store: .google, flowNo: flowNo, productID: productID, quantity: quantity,
                                               environment: accepted.environment,
                                               accountToken: purchase.obfuscatedExternalAccountId, purchaseToken: token)
        guard let owner else {
            try ledger.keepUnclaimed(purchaseCredit, deadline: deadline)
            return "unclaimed"
        }
        let result = try ledger.creditAndWait(purchaseCredit.credit(to: owner, client: "googleplay-notification"),
                                              deadline: deadline)
        switch result.outcome {
        case .credited:
            metrics.countCoins(.credited, result.credit?.amount ?? 0)
            metrics.countCredit(.notification)
            metrics.countGoogleConsume(.queued)
            return "credited"
        case .replayed:
            return "replayed"
        default:
            return "refused:\(result.outcome.rawValue)"
        }
    }

    /// Google's voids of a pushed purchase token, and the flowNO they are
    /// filed under.
    struct Confirmed {
        var voids: [GooglePlayVoid]
        var flowNo: String
    }

    /// What Google says of a pushed void. The voided list around the event
    /// must show a void of the pushed kind for the token: a partial one
    /// (with `voidedQuantity`) for `refundType` 2, a whole one otherwise;
    /// then every void it lists for the token is applied. A whole void the
    /// list does not show yet is confirmed by the purchase itself when the
    /// token is credited and `purchases.products.get` shows it canceled.
    /// Anything else is `void_not_confirmed`.
    private func confirmedVoids(token: String, refundType: Int?, eventTime: Date, voids: GooglePlayVoids, requestID: String,
                                deadline: ContinuousClock.Instant) throws -> Confirmed {
        let partial = refundType == GooglePlayRefundType.partial.rawValue
        let now = Date()
        let start = min(max(eventTime.addingTimeInterval(-GooglePlayVoids.pushLookBackSeconds),
                            now.addingTimeInterval(-GooglePlayVoids.listDaysMax * 86_400 + GooglePlayVoids.listMarginSeconds)),
                        now.addingTimeInterval(-GooglePlayVoids.pushLookBackSeconds))
        let listed: [VoidedPurchase]
        do {
            listed = try voids.voided(from: start, to: nil, only: token).purchases
        } catch {
            metrics.countGooglePlayNotification(.notApplied(.error))
            logger.warning("the voided purchases list could not be read for a pushed void", ["error": error.description])
            throw WalletError.verificationUnavailable
        }
        if let shown = listed.first(where: { $0.isPartial == partial }) {
            return Confirmed(voids: listed.map { GooglePlayVoids.void($0, source: .push) },
                             flowNo: GooglePlayVoids.flowNo(shown))
        }
        if !partial, let canceled = try canceledPurchase(token: token, eventTime: eventTime, voids: voids, deadline: deadline) {
            return canceled
        }
        metrics.countGooglePlayNotification(.notApplied(.unconfirmed))
        logger.warning("a pushed Google Play void is not confirmed by Google; nothing recorded",
                       ["request.id": requestID, "googleplay.refund_type": refundType.map(String.init) ?? "none"])
        throw GooglePlayPushError.voidNotConfirmed
    }

    /// A void of the whole purchase, as `purchases.products.get` shows it
    /// (purchaseState 1, canceled) for a credited token; nil when the token
    /// is not credited, or Google shows it otherwise.
    private func canceledPurchase(token: String, eventTime: Date, voids: GooglePlayVoids,
                                  deadline: ContinuousClock.Instant) throws -> Confirmed? {
        let productID: String
        do {
            guard let credited = try voids.ledger.creditedGoogleProductID(purchaseToken: token, deadline: deadline) else {
                return nil
            }
            productID = credited
        } catch {
            metrics.countGooglePlayNotification(.notApplied(.error))
            throw error
        }
        let purchase: ProductPurchase
        do {
            purchase = try voids.client.productPurchase(productID: productID, token: token, deadline: voids.client.deadline())
        } catch {
            switch error {
            case .notFound, .refused:
                return nil
            case .unavailable, .malformedAnswer:
                metrics.countGooglePlayNotification(.notApplied(.error))
                logger.warning("Google Play could not be asked about a pushed void", ["error": error.description])
                throw WalletError.verificationUnavailable
            }
        }
        guard purchase.purchaseState == ProductPurchase.stateCanceled, purchase.productId.map({ $0 == productID }) ?? true
        else { return nil }
        let void = GooglePlayVoid(voidedAtMilliseconds: Int64((eventTime.timeIntervalSince1970 * 1000).rounded()),
                                  refundType: .full, voidedQuantity: nil, orderID: purchase.orderId, source: .push)
        return Confirmed(voids: [void], flowNo: PurchasePolicy.flowNo(orderID: purchase.orderId, purchaseToken: token))
    }
}
