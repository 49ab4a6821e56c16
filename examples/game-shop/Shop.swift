import Foundation
import WalletClient

/// The shop's catalog: prices in coins.
let catalog: [String: Int64] = ["sword": 500, "shield": 300, "potion": 50]

/// The game's own item service failed to hand the item over.
struct DeliveryFailed: Error, CustomStringConvertible {
    var description: String
}

/// Sells an item for coins: a hold reserves the price, the item is
/// delivered, and the hold is captured; when the delivery fails the hold is
/// released, so the player never pays for an item they did not get and never
/// gets an item they did not pay for.
struct Shop {
    /// A key with scopes debit and read (`make run`'s game-server key).
    let wallet: WalletClient
    /// Whether the game's item service is down (to show a failed delivery).
    let deliveryFails: Bool

    /// The hold covers delivery and capture: if the shop dies in between, the
    /// coins come back to the player on their own after this long.
    static let holdSeconds = 120

    /// One sale, from the order to its end; prints what happened.
    func sell(item: String, to userID: String, order: String, state: inout ShopState,
              saving save: (ShopState) throws -> Void) async throws {
        guard let price = catalog[item] else {
            throw UsageError("no item \(item) in the shop; it sells \(catalog.keys.sorted().joined(separator: ", "))")
        }
        // The order is on disk before the wallet hears of it: a shop that dies
        // mid-sale is run again with the same order, finds it pending and
        // repeats its steps with the same keys (the wallet replays the ones
        // that already ran).
        let index: Int
        if let known = state.sales.firstIndex(where: { $0.order == order }) {
            let sale = state.sales[known]
            guard sale.userID == userID, sale.item == item else {
                throw UsageError("order \(order) is \(sale.item) for \(sale.userID)")
            }
            guard sale.status == .pending else {
                print("order \(order) has ended: \(sale.status.rawValue)")
                return
            }
            index = known
        } else {
            state.sales.append(Sale(order: order, userID: userID, item: item, price: price, holdID: nil, status: .pending))
            index = state.sales.count - 1
            try save(state)
        }

        let hold: WriteResult<HoldResponse>
        do {
            hold = try await wallet.createHold(userID: userID, amount: price, reason: "shop: \(item)",
                                               metadata: ["order": .string(order), "item": .string(item)],
                                               expiresInSeconds: Self.holdSeconds, idempotencyKey: "\(order):hold")
        } catch let refused as InsufficientFundsError {
            let advice = refused.balance < 0 ? "the player owes coins; offer a coin pack" : "offer a coin pack"
            state.sales[index].status = .refused
            state.sales[index].note = "insufficient funds: available \(refused.available)"
            try save(state)
            print("refused \(item) for \(userID) (order \(order)): \(price) coin wanted, "
                + "available \(refused.available), balance \(refused.balance); \(advice)")
            return
        }
        state.sales[index].holdID = hold.hold.id
        try save(state)

        do {
            try deliver(item, to: userID)
        } catch let failure as DeliveryFailed {
            let released: WriteResult<HoldReleaseResponse>
            do {
                released = try await wallet.releaseHold(id: hold.hold.id, idempotencyKey: "\(order):release")
            } catch is HoldNotActiveError {
                // The hold ran out first: nothing is held for it any more.
                return try await undoDelivery(of: index, state: &state, saving: save, because: "delivery failed: \(failure)")
            }
            state.sales[index].status = .released
            state.sales[index].note = "delivery failed: \(failure)"
            try save(state)
            print("delivery of \(item) to \(userID) failed (\(failure)): hold \(hold.hold.id) \(released.hold.status); "
                + "balance \(released.balance.balance), available \(released.balance.available) (order \(order))")
            return
        }

        do {
            let captured = try await wallet.captureHold(id: hold.hold.id, idempotencyKey: "\(order):capture")
            state.sales[index].status = .delivered
            try save(state)
            print("sold \(item) to \(userID) for \(captured.debit.amount) coin: hold \(hold.hold.id) \(captured.hold.status), "
                + "debit \(captured.debit.id); balance \(captured.balance.balance) (order \(order))")
        } catch let error as InsufficientFundsError {
            // A refund took the balance below the hold while the item was on
            // its way: the capture is refused and the hold stays. Undo the delivery.
            try await undoDelivery(of: index, state: &state, saving: save,
                                   because: "capture refused: balance \(error.balance) after a refund")
        } catch let error as HoldNotActiveError {
            // The hold ran out (or was released by an operator) before the capture.
            try await undoDelivery(of: index, state: &state, saving: save, because: "the hold is \(error.holdStatus)")
        }
    }

    private func undoDelivery(of index: Int, state: inout ShopState, saving save: (ShopState) throws -> Void,
                              because reason: String) async throws {
        let sale = state.sales[index]
        if let holdID = sale.holdID {
            do {
                _ = try await wallet.releaseHold(id: holdID, idempotencyKey: "\(sale.order):release")
            } catch is HoldNotActiveError {
                // Already gone: nothing is held for it.
            }
        }
        state.sales[index].status = .released
        state.sales[index].note = reason
        try save(state)
        print("took back \(sale.item) from \(sale.userID) unpaid (\(reason)); order \(sale.order) released")
    }

    /// The game's item service, standing in: it fails when told to.
    private func deliver(_ item: String, to userID: String) throws {
        if deliveryFails {
            throw DeliveryFailed(description: "the item service did not answer")
        }
    }
}
