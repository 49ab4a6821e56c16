import Foundation
import GooglePlay
import HTTPServer
import Logging
import WalletCore
import WalletStore

/// Google Play's word on purchases, by push and by sweep, through one path:
/// a void of a one-time product becomes a refund that converges on what
/// Google reports voided (`wallet.apply_googleplay_voids`).
struct GooglePlayVoids: Sendable {
    let client: PlayClient
    let ledger: Ledger
    let metrics: Metrics
    let logger: Logger

    /// How far around a pushed void's event time the voided list is read
    /// for its quantity.
    static let pushLookBackSeconds = 3_600.0
    static let pagesMax = 1_000

    /// The voids Google lists between `start` and `end`, by purchase token,
    /// every page read; with `only`, that token's alone.
    func voided(from start: Date, to end: Date?, only: String? = nil) throws(PlayAPIError) -> [String: [VoidedPurchase]] {
        var byToken: [String: [VoidedPurchase]] = [:]
        var pageToken: String?
        for _ in 0..<Self.pagesMax {
            let page = try client.voidedPurchases(startTime: start, endTime: end, pageToken: pageToken,
                                                  deadline: client.deadline())
            for purchase in page.purchases where only == nil || purchase.purchaseToken == only {
                byToken[purchase.purchaseToken, default: []].append(purchase)
            }
            guard let next = page.nextPageToken else { return byToken }
            pageToken = next
        }
        throw .malformedAnswer("the voided purchases list has more than \(Self.pagesMax) pages")
    }

    static func void(_ purchase: VoidedPurchase, source: String) -> GooglePlayVoid {
        let partial = purchase.refundType == 2 && purchase.voidedQuantity != nil
        return GooglePlayVoid(voidedAtMilliseconds: purchase.voidedTimeMillis, refundType: partial ? 2 : 1,
                              voidedQuantity: partial ? purchase.voidedQuantity : nil, orderID: purchase.orderId,
                              source: source)
    }

    /// Counts the coins applying voids took back.
    func countRefunded(_ applied: GooglePlayApplied) {
        metrics.countCoins(.refunded, applied.refundedCoins)
    }
}

/// Sweeps Google Play's voided-purchases list (the last 30 days, which is
/// all Google keeps) and applies every void of a one-time product, whether
/// or not its notification arrived.
struct VoidedPurchasesSweep: MarkedSweep {
    let voids: GooglePlayVoids

    var markKey: String { "googleplay-voided" }
    var historyDaysMax: Int { 30 }
    var firstSweepDays: Int { 30 }

    func sweep(from start: Date, to end: Date) throws(Reconciler.SweepError) -> Reconciler.Summary {
        let byToken: [String: [VoidedPurchase]]
        do {
            byToken = try voids.voided(from: start, to: end)
        } catch {
            throw Reconciler.SweepError(description: "Google Play voided purchases: \(error.description)")
        }
        var summary = Reconciler.Summary()
        for (token, purchases) in byToken.sorted(by: { $0.key < $1.key }) {
            summary.seen += purchases.count
            let flowNo = PurchasePolicy.flowNo(orderID: purchases.compactMap(\.orderId).first, purchaseToken: token)
            do {
                let applied = try voids.ledger.applyGooglePlayVoids(
                    flowNo: flowNo, purchaseToken: token, voids: purchases.map { GooglePlayVoids.void($0, source: "sweep") },
                    deadline: .now + .seconds(Reconciler.applySeconds))
                voids.countRefunded(applied)
                if ["refunded", "revoked"].contains(applied.outcome) { summary.applied += 1 } else { summary.already += 1 }
            } catch {
                throw Reconciler.SweepError(description: "a Google Play void could not be applied: \(String(describing: error))")
            }
        }
        return summary
    }
}

/// `POST /v1/googleplay/notifications`: Google Play's real-time developer
/// notifications, pushed by a Pub/Sub push subscription with an OIDC token.
///
/// Pub/Sub retries every answer that is not 2xx, so anything settled is
/// 204: processed, a duplicate (by messageId), or ignored (another app's
/// package). A bad token is 401 and a malformed body 400; Google's keys or
/// API unreachable, or the ledger, 503, so the push comes again. The work
/// (fetching Google's keys, reading the voided list, the database) runs on
/// threads of its own, never on a server thread, and never on the App
/// Store's: a push whose key is being fetched from Google waits there, and
/// a full queue answers the push 503, which Pub/Sub retries.
struct GooglePlayNotificationsAPI: Sendable {
    let authenticator: PushAuthenticator?
    let voids: GooglePlayVoids?
    let packageName: String?
    /// Present when the route is set up.
    let work: BlockingWork?
    let metrics: Metrics
    let requestTimeoutSeconds: Int
    let logger: Logger

    func register(on router: Router) {
        router.add("POST", "/v1/googleplay/notifications", postNotification)
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
                if case WalletError.overloaded = error { metrics.countGooglePlayNotification("overloaded") }
                responder.fail(error)
            }
        }
        if !queued {
            metrics.countGooglePlayNotification("overloaded")
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
                metrics.countGooglePlayNotification("error")
                throw WalletError.verificationUnavailable
            }
            metrics.countGooglePlayNotification("unauthorized")
            logger.warning("Google Play notification refused", ["request.id": request.requestID,
                                                                "googleplay.reason": error.reason.rawValue])
            throw GooglePlayPushError.unauthorized(reason: error.reason.rawValue)
        }
        let message: PushMessage
        do {
            message = try PushMessage.parse(request.body)
        } catch {
            metrics.countGooglePlayNotification("malformed")
            throw GooglePlayPushError.malformed(detail: error.description)
        }
        let notification = message.notification
        guard notification.packageName == packageName else {
            metrics.countGooglePlayNotification("ignored")
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
                record.flowNo = PurchasePolicy.flowNo(orderID: orderID, purchaseToken: token)
                record.voids = try pushedVoids(token: token, orderID: orderID, refundType: refundType,
                                               eventTime: notification.eventTime, voids: voids)
            }
        case .oneTimeProduct(_, let token, _):
            record.purchaseToken = token
        case .subscription, .test, .other:
            break
        }
        let applied: GooglePlayApplied
        do {
            applied = try voids.ledger.applyGooglePlayNotification(record, deadline: deadline)
        } catch {
            metrics.countGooglePlayNotification("error")
            throw error
        }
        voids.countRefunded(applied)
        metrics.countGooglePlayNotification(applied.outcome)
        logger.info("Google Play notification applied", ["request.id": request.requestID, "googleplay.kind": record.kind,
                                                         "googleplay.outcome": applied.outcome])
        return Response(status: 204)
    }

    /// A full refund voids the whole purchase; a partial one's quantity is
    /// read from the voided list around the event. When the list does not
    /// show it yet, the push is answered 503 and comes again.
    private func pushedVoids(token: String, orderID: String?, refundType: Int?, eventTime: Date,
                             voids: GooglePlayVoids) throws -> [GooglePlayVoid] {
        guard refundType == 2 else {
            let milliseconds = Int64((eventTime.timeIntervalSince1970 * 1000).rounded())
            return [GooglePlayVoid(voidedAtMilliseconds: milliseconds, refundType: 1, voidedQuantity: nil, orderID: orderID,
                                   source: "push")]
        }
        let listed: [VoidedPurchase]
        do {
            listed = try voids.voided(from: eventTime.addingTimeInterval(-GooglePlayVoids.pushLookBackSeconds), to: nil,
                                      only: token)[token] ?? []
        } catch {
            metrics.countGooglePlayNotification("error")
            logger.warning("the voided purchases list could not be read for a pushed partial refund",
                           ["error": error.description])
            throw WalletError.verificationUnavailable
        }
        let partial = listed.filter { $0.refundType == 2 && $0.voidedQuantity != nil }
        guard !partial.isEmpty else {
            metrics.countGooglePlayNotification("error")
            throw WalletError.verificationUnavailable
        }
        return partial.map { GooglePlayVoids.void($0, source: "push") }
    }
}
