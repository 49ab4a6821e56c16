package import Foundation
import GooglePlay
import Logging
package import ServiceSupport
import WalletCore
import WalletStore

/// Sweeps Google Play's voided-purchases list (the last 30 days, which is
/// all Google keeps) and applies every void of a one-time product, whether
/// or not its notification arrived.
///
/// Each void is applied on its own, in the order Google voided them. One the
/// database does not apply is logged and counted (`failed`), and the rest
/// are still applied; the sweep's mark then stays at the last void applied
/// before it, so the next sweep reads it again. An entry the service does
/// not take at all (`VoidedPurchase.Unusable`) is logged and counted
/// `refused`: reading it again would change nothing. The database out of
/// reach stops the sweep, and its mark stays where it was.
package struct VoidedPurchasesSweep: MarkedSweep {
    package let voids: GooglePlayVoids

    package init(voids: GooglePlayVoids) {
        self.voids = voids
    }

    package var markKey: String { "googleplay-voided" }
    package var historyDaysMax: Int { 30 }
    package var firstSweepDays: Int { 30 }

    package func sweep(from start: Date, to end: Date) throws(Reconciler.SweepError) -> Reconciler.Summary {
        let listing: GooglePlayVoids.Listing
        do {
            listing = try voids.voided(from: start, to: end)
        } catch {
            throw Reconciler.SweepError(description: "Google Play voided purchases: \(error.description)")
        }
        var summary = Reconciler.Summary()
        for refusal in listing.refused {
            summary.seen += 1
            summary.refused += 1
            summary.refusals.append("Google Play voided purchase refused: \(refusal.description)")
            voids.metrics.countGoogleVoids(.refused)
        }
        var lastApplied: Int64?
        var failedYet = false
        // Stable: voids of one time keep Google's order.
        let ordered = listing.purchases.enumerated().sorted {
            ($0.element.voidedTimeMillis, $0.offset) < ($1.element.voidedTimeMillis, $1.offset)
        }.map(\.element)
        for purchase in ordered {
            summary.seen += 1
            do {
                let applied = try voids.ledger.applyGooglePlayVoids(
                    flowNo: GooglePlayVoids.flowNo(purchase), purchaseToken: purchase.purchaseToken,
                    voids: [GooglePlayVoids.void(purchase, source: .sweep)],
                    deadline: .now + .seconds(Reconciler.applySeconds))
                voids.count(applied)
                if [.refunded, .revoked].contains(applied.outcome) { summary.applied += 1 } else { summary.already += 1 }
                if !failedYet { lastApplied = purchase.voidedTimeMillis }
            } catch WalletError.databaseUnavailable {
                throw Reconciler.SweepError(description: "a Google Play void could not be applied: the database is unavailable")
            } catch {
                summary.failed += 1
                let failure = "a Google Play void could not be applied (\(purchase.description)): \(String(describing: error))"
                summary.failures.append(failure)
                voids.metrics.countGoogleVoids(.failed)
                voids.logger.warning("a Google Play void could not be applied; the next sweep tries it again",
                                     ["googleplay.order_id": purchase.orderId ?? "none",
                                      "googleplay.voided_at_ms": String(purchase.voidedTimeMillis),
                                      "error": String(describing: error)])
                if !failedYet {
                    failedYet = true
                    // Where the mark stays: the last void applied before this
                    // one, or (none) the start, which never moves it back.
                    summary.markMilliseconds = lastApplied ?? Int64(start.timeIntervalSince1970 * 1000)
                }
            }
        }
        return summary
    }
}
