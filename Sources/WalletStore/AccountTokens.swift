import Postgres
public import WalletCore

/// A player's account tokens for the stores, as the wallet issues them: the
/// App Store's `appAccountToken` (nil when no namespace is configured) and
/// Google Play's `obfuscatedExternalAccountId`. A purchase the store reports
/// on its own carries one of them and no player; the wallet records each
/// token's player (Migrations/functions/17_account_tokens.sql).
public struct AccountTokens: Sendable, Equatable {
    public var userID: UserID
    /// Lowercase canonical UUID.
    public var apple: String?
    /// 64 lowercase hexadecimal digits.
    public var google: String

    public init(userID: UserID, apple: String?, google: String) {
        self.userID = userID
        self.apple = apple
        self.google = google
    }
}

/// A token already recorded for another player: the derivations would have
/// had to collide (or the namespace to have changed onto another player's
/// token), so nothing is recorded and nothing is answered.
public struct AccountTokenConflict: Error, CustomStringConvertible {
    public let store: String

    public var description: String { "the \(store) account token is recorded for another player" }
}

extension Ledger {
    /// Records, idempotently and durably, that `tokens` name their player.
    public func recordAccountTokens(_ tokens: AccountTokens, deadline: ContinuousClock.Instant) throws {
        let rows = try writeBounded(.statement, pool: pool, metrics: metrics, deadline: deadline) { connection in
            try connection.prepared("""
                SELECT store, user_id FROM wallet.record_account_tokens(
                    \(tokens.userID.rawValue), \(tokens.apple), \(tokens.google))
                """).map { (try $0.decode(String.self, at: 0), try $0.decode(String.self, at: 1)) }
        }
        if let taken = rows.first(where: { $0.1 != tokens.userID.rawValue }) {
            throw AccountTokenConflict(store: taken.0)
        }
        let expected = tokens.apple == nil ? 1 : 2
        guard rows.count == expected else { throw LedgerStore.StoreError.unexpectedRowCount(rows.count, expected) }
    }

    /// Tells the database the App Store namespace the service runs with
    /// (nil: none), so a wallet an admin script makes records its token too.
    public func setAccountTokenNamespace(_ namespace: String?, deadline: ContinuousClock.Instant) throws {
        _ = try writeBounded(.statement, pool: pool, metrics: metrics, deadline: deadline) { connection in
            try connection.prepared("SELECT wallet.set_account_token_namespace(\(namespace)::uuid)")
        }
    }
}

/// A verified purchase that names no known player, kept until it is
/// credited (wallet.unclaimed_purchases).
public struct UnclaimedPurchase: Sendable, Equatable {
    public var store: AccountTokenStore
    public var flowNo: FlowNumber
    public var productID: ProductID
    public var quantity: Quantity
    public var environment: PurchaseEnvironment
    /// As the purchase carried it, lowercase; nil if it carried none.
    public var accountToken: String?
    /// A Google Play purchase's token: its credit is the token's.
    public var purchaseToken: String?

    public init(store: AccountTokenStore, flowNo: FlowNumber, productID: ProductID, quantity: Quantity,
                environment: PurchaseEnvironment, accountToken: String?, purchaseToken: String? = nil) {
        self.store = store
        self.flowNo = flowNo
        self.productID = productID
        self.quantity = quantity
        self.environment = environment
        self.accountToken = accountToken?.lowercased()
        self.purchaseToken = purchaseToken
    }

    /// Its credit, to `userID`: under its flowNO, from the store's own
    /// report (`appstore-notification`), or Google's token (`googleplay`).
    public func credit(to userID: UserID, client: String) -> LedgerStore.CreditOperation {
        LedgerStore.CreditOperation(client: client, flowNo: flowNo, userID: userID, productID: productID, quantity: quantity,
                                    claimedAmount: nil, source: purchaseToken == nil ? .appStoreNotification : .googlePlay,
                                    environment: environment, purchaseToken: purchaseToken)
    }
}

/// Which store issued an account token: `wallet.account_tokens.store`.
public enum AccountTokenStore: String, Sendable, CaseIterable {
    case apple
    case google
}

extension Ledger {
    /// The player `token` names, or nil.
    public func accountTokenOwner(_ store: AccountTokenStore, token: String,
                                  deadline: ContinuousClock.Instant) throws -> UserID? {
        try reads.run(deadline: deadline) { connection in
            try connection.prepared("SELECT wallet.account_token_owner(\(store.rawValue), \(token))")[0]
                .decodeIfPresent(String.self, at: 0)
        }.flatMap(UserID.init)
    }

    /// Keeps `purchase` for a player to claim, once per flowNO; returns
    /// false for one kept already or credited meanwhile.
    @discardableResult
    public func keepUnclaimed(_ purchase: UnclaimedPurchase, deadline: ContinuousClock.Instant) throws -> Bool {
        try writeBounded(.statement, pool: pool, metrics: metrics, deadline: deadline) { connection in
            try connection.prepared("""
                SELECT wallet.keep_unclaimed_purchase(\(purchase.store.rawValue), \(purchase.flowNo.rawValue),
                    \(purchase.productID.rawValue), \(Int32(purchase.quantity.value)), \(purchase.environment.rawValue),
                    \(purchase.accountToken), \(purchase.purchaseToken))
                """)[0].decode(Bool.self, at: 0)
        }
    }

    /// The unclaimed purchases that carry one of `tokens` (at most 100).
    public func unclaimedPurchases(carrying tokens: AccountTokens,
                                   deadline: ContinuousClock.Instant) throws -> [UnclaimedPurchase] {
        try reads.run(deadline: deadline) { connection in
            try connection.prepared("""
                SELECT store, flow_no, product_id, quantity, environment, account_token, purchase_token
                FROM wallet.unclaimed_purchases
                WHERE (store = 'apple' AND account_token = \(tokens.apple?.lowercased()))
                   OR (store = 'google' AND account_token = \(tokens.google.lowercased()))
                ORDER BY received_at LIMIT 100
                """).compactMap { row -> UnclaimedPurchase? in
                guard let store = AccountTokenStore(rawValue: try row.decode(String.self, at: 0)),
                      let flowNo = FlowNumber(try row.decode(String.self, at: 1)),
                      let productID = ProductID(try row.decode(String.self, at: 2)),
                      let quantity = Quantity(Int(try row.decode(Int32.self, at: 3))),
                      let environment = PurchaseEnvironment(rawValue: try row.decode(String.self, at: 4)) else { return nil }
                return UnclaimedPurchase(store: store, flowNo: flowNo, productID: productID, quantity: quantity,
                                         environment: environment,
                                         accountToken: try row.decodeIfPresent(String.self, at: 5),
                                         purchaseToken: try row.decodeIfPresent(String.self, at: 6))
            }
        }
    }
}

/// How many purchases wait unclaimed, and the oldest one's age.
public struct UnclaimedPurchases: Sendable, Equatable {
    public var count: Int64
    public var oldestSeconds: Int64

    public init(count: Int64, oldestSeconds: Int64) {
        self.count = count
        self.oldestSeconds = oldestSeconds
    }
}

extension Ledger {
    /// The unclaimed purchases' count and the oldest one's age, for /metrics.
    public func unclaimedPurchases() throws -> UnclaimedPurchases {
        try reads.run { connection in
            let row = try connection.prepared("""
                SELECT count(*), coalesce(extract(epoch FROM now() - min(received_at))::BIGINT, 0)
                FROM wallet.unclaimed_purchases
                """)[0]
            return UnclaimedPurchases(count: try row.decode(Int64.self, at: 0), oldestSeconds: try row.decode(Int64.self, at: 1))
        }
    }

    /// Deletes up to `limit` of the unclaimed purchases received more than
    /// `days` ago; returns how many.
    public func purgeUnclaimedPurchases(olderThanDays days: Int, limit: Int) throws -> Int {
        try writeBounded(.statement, pool: pool, metrics: metrics, deadline: .now + .seconds(30)) { connection in
            Int(try connection.prepared("""
                SELECT wallet.purge_unclaimed_purchases(now() - make_interval(days => \(Int32(days))), \(Int32(limit)))
                """)[0].decode(Int32.self, at: 0))
        }
    }
}

extension Ledger {
    /// The catalog product a Google Play product id buys: the one active
    /// product it names (its own id when it names none), or nil when none
    /// or several do.
    public func catalogProduct(googleProductID: String, deadline: ContinuousClock.Instant) throws -> ProductID? {
        let names = try reads.run(deadline: deadline) { connection in
            try connection.prepared("""
                SELECT product_id FROM wallet.products
                WHERE active AND coalesce(google_product_id, product_id) = \(googleProductID)
                """).map { try $0.decode(String.self, at: 0) }
        }
        return names.count == 1 ? ProductID(names[0]) : nil
    }
}
