import WalletClient

/// Follows the wallet's event feed and takes items back from players whose
/// coins were refunded after they spent them.
///
/// A refund takes the purchase's coins back; when the player had already
/// spent them, the balance goes below zero (debt) and the items bought with
/// them were, in effect, free. The watcher takes back shop items worth at
/// least that debt, newest first: on `credit.refunded` that left the balance
/// below zero, and on `balance.negative` whatever made it (an operator's
/// revoke, say), counting each debt once whichever event reports it.
struct RefundWatcher {
    /// A key with scope events.
    let feed: WalletClient
    /// The only currency the shop sells in.
    static let currency = "coin"

    struct Summary {
        var events = 0
        var revoked = 0
    }

    /// Reads the feed from the stored position until it is caught up.
    func follow(state: inout ShopState, saving save: (ShopState) throws -> Void) async throws -> Summary {
        var summary = Summary()
        for try await event in feed.events(after: state.feedPosition, pageSize: 500) {
            summary.revoked += handle(event, state: &state)
            summary.events += 1
            state.feedPosition = event.id
            // With the state it changed, so an event is handled once.
            try save(state)
        }
        return summary
    }

    /// Returns how many items it took back.
    private func handle(_ event: Event, state: inout ShopState) -> Int {
        guard event.currency == Self.currency else { return 0 }
        if event.balanceAfter >= 0 {
            // Out of debt (or never in it): a later debt is a new one.
            state.debtCovered[event.userID] = nil
        }
        switch event.type {
        case .creditRefunded:
            let flowNo = event.flowNo ?? "?"
            guard event.balanceAfter < 0 else {
                print("refund of flowNO \(flowNo) for \(event.userID): nothing to take back "
                    + "(the refunded coins were unspent; balance \(event.balanceAfter))")
                return 0
            }
            return takeBack(from: event.userID, debt: -event.balanceAfter,
                            because: "refund of flowNO \(flowNo) left a debt of \(-event.balanceAfter) coin", state: &state)
        case .balanceNegative:
            let cause = event.data["cause"]?.stringValue ?? "a change"
            return takeBack(from: event.userID, debt: -event.balanceAfter,
                            because: "balance \(event.balanceAfter) after \(cause)", state: &state)
        default:
            return 0
        }
    }

    private func takeBack(from userID: String, debt: Int64, because reason: String, state: inout ShopState) -> Int {
        var covered = state.debtCovered[userID] ?? 0
        var taken = 0
        // Newest first: the items most likely bought with the refunded coins.
        for index in state.sales.indices.reversed() where covered < debt {
            let sale = state.sales[index]
            guard sale.userID == userID, sale.status == .delivered else { continue }
            state.sales[index].status = .revoked
            state.sales[index].note = reason
            covered += sale.price
            taken += 1
            print("revoke \(sale.item) from \(userID) (order \(sale.order), paid \(sale.price) coin): \(reason)")
        }
        state.debtCovered[userID] = covered
        if taken == 0 {
            if covered >= debt {
                print("\(userID) owes \(debt) coin: items worth \(covered) coin already revoked for it; offer a coin pack")
            } else {
                print("\(userID) owes \(debt) coin and has no shop items left to take back; flag the player for review")
            }
        }
        return taken
    }
}
