import Postgres
public import WalletCore

/// Lots (Migrations/0026_lots.sql and after): where a wallet's coins came
/// from. They are made and taken by the posting function alone; the
/// service only sets how they are spent and sweeps the ones past expiry.
extension Ledger {
    /// Tells the database the spending order the service runs with
    /// (WALLET_SPEND_PAID_FIRST), so the admin scripts take coins from lots
    /// in the same order.
    public func setSpendingOrder(paidFirst: Bool, deadline: ContinuousClock.Instant) throws {
        _ = try writeBounded(.statement, pool: pool, metrics: metrics, deadline: deadline) { connection in
            try connection.prepared("SELECT wallet.set_spending_order(\(paidFirst))")
        }
    }

    /// Tells the database what refunds do past the wallet's coins
    /// (WALLET_REFUND_DEBT), so the admin scripts refund alike.
    public func setRefundDebt(_ mode: RefundDebt, deadline: ContinuousClock.Instant) throws {
        _ = try writeBounded(.statement, pool: pool, metrics: metrics, deadline: deadline) { connection in
            try connection.prepared("SELECT wallet.set_refund_debt(\(mode.rawValue))")
        }
    }

    /// Whether `currency` is one of the catalog's (wallet.currencies).
    public func currencyExists(_ currency: Currency) throws -> Bool {
        try reads.run {
            try $0.prepared("SELECT EXISTS (SELECT FROM wallet.currencies WHERE code = \(currency.rawValue))")[0]
                .decode(Bool.self, at: 0)
        }
    }

    /// Takes coins past their lot's expiry out of up to `wallets` wallets,
    /// one wallet per transaction (Migrations/functions/18_lot_expiry.sql);
    /// returns the coins expired.
    public func expireLots(wallets: Int) throws -> Int64 {
        var expired: Int64 = 0
        for _ in 0..<wallets {
            let coins = try writeBounded(.statement, pool: pool, metrics: metrics, deadline: .now + .seconds(10)) {
                try $0.prepared("SELECT wallet.expire_lots()")[0].decode(Int64.self, at: 0)
            }
            if coins == 0 { break }
            expired += coins
        }
        return expired
    }
}
