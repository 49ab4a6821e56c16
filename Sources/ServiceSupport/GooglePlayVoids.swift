package import Foundation
package import GooglePlay
package import Logging
import WalletCore
package import WalletStore

/// Google Play's word on purchases, by push and by sweep, through one path:
/// a void of a one-time product becomes a refund that converges on what
/// Google reports voided (`wallet.apply_googleplay_voids`).
///
/// Google is the authority, never the push. A void is applied only as
/// Google's voided-purchases list shows it (or, for a void of a whole
/// credited purchase the list does not show yet, as `purchases.products.get`
/// shows the purchase canceled). The list's entries have no refund type: an
/// entry with `voidedQuantity` is a quantity-based partial refund of that
/// many units, one without is a void of the whole purchase.
package struct GooglePlayVoids: Sendable {
    package let client: PlayClient
    package let ledger: Ledger
    package let metrics: Metrics
    package let logger: Logger

    package init(client: PlayClient, ledger: Ledger, metrics: Metrics, logger: Logger) {
        self.client = client
        self.ledger = ledger
        self.metrics = metrics
        self.logger = logger
    }

    /// How far before a pushed void's event time the voided list is read.
    package static let pushLookBackSeconds = 3_600.0
    /// Google lists 30 days of voids and refuses an older start time; a
    /// little is kept back for clocks that differ.
    package static let listDaysMax = 30.0
    package static let listMarginSeconds = 300.0
    package static let pagesMax = 1_000

    /// What the voided list held between two times: the entries taken, in
    /// the order Google listed them, and those refused.
    package struct Listing: Sendable {
        package var purchases: [VoidedPurchase] = []
        package var refused: [VoidedEntryRefusal] = []
    }

    /// The voids Google lists between `start` and `end`, every page read;
    /// with `only`, that token's alone.
    package func voided(from start: Date, to end: Date?, only: String? = nil) throws(PlayAPIError) -> Listing {
        var listing = Listing()
        var pageToken: String?
        for _ in 0..<Self.pagesMax {
            let page = try client.voidedPurchases(startTime: start, endTime: end, pageToken: pageToken,
                                                  deadline: client.deadline())
            listing.purchases += page.purchases.filter { only == nil || $0.purchaseToken == only }
            if only == nil { listing.refused += page.refused }
            guard let next = page.nextPageToken else { return listing }
            pageToken = next
        }
        throw .malformedAnswer("the voided purchases list has more than \(Self.pagesMax) pages")
    }

    /// A listed void as the ledger records it.
    package static func void(_ purchase: VoidedPurchase, source: GooglePlayVoidSource) -> GooglePlayVoid {
        GooglePlayVoid(voidedAtMilliseconds: purchase.voidedTimeMillis, refundType: purchase.isPartial ? .partial : .full,
                       voidedQuantity: purchase.voidedQuantity, orderID: purchase.orderId, source: source)
    }

    /// The flowNO a listed void's purchase is (or would be) credited under.
    package static func flowNo(_ purchase: VoidedPurchase) -> String {
        PurchasePolicy.flowNo(orderID: purchase.orderId, purchaseToken: purchase.purchaseToken)
    }

    /// Counts the coins applying voids took back, and how it ended.
    package func count(_ applied: GooglePlayApplied<GooglePlayVoidOutcome>) {
        metrics.countCoins(.refunded, applied.refundedCoins)
        metrics.countGoogleVoids(.applied(applied.outcome))
    }

    /// The same for a notification's voids: one recorded without voids, or
    /// seen before, applied none.
    package func count(_ applied: GooglePlayApplied<GooglePlayNotificationOutcome>) {
        metrics.countCoins(.refunded, applied.refundedCoins)
        if case .voids(let outcome) = applied.outcome { metrics.countGoogleVoids(.applied(outcome)) }
    }
}
