import Foundation
import JSON
import Postgres
public import WalletCore

/// A catalog product as Google Play knows it.
public struct GooglePlayProduct: Sendable, Equatable {
    /// Its Google Play id: the catalog's own id unless it names another.
    public var googleProductID: String
    /// How many active products have that Google Play id, this one included.
    /// More than one is a catalog a purchase cannot be matched against.
    public var activeProducts: Int
}

/// What Google Play credits and voids read from the ledger before Google is asked.
extension LedgerStore {
    /// The active product's Google Play id, and how many active products
    /// share it; nil when it is not an active product.
    static func googlePlayProduct(of productID: ProductID, on connection: Connection) throws -> GooglePlayProduct? {
        try connection.prepared("""
            SELECT coalesce(p.google_product_id, p.product_id),
                   (SELECT count(*) FROM wallet.products q
                    WHERE q.active AND coalesce(q.google_product_id, q.product_id) = coalesce(p.google_product_id, p.product_id))
            FROM wallet.products p
            WHERE p.product_id = \(productID.rawValue) AND p.active
            """).single.map {
            GooglePlayProduct(googleProductID: try $0.decode(String.self, at: 0), activeProducts: try $0.decode(Int.self, at: 1))
        }
    }

    /// The Google Play id of the product a purchase token is credited as
    /// (active or not), or nil when the token was never credited.
    static func creditedGoogleProductID(purchaseToken: String, on connection: Connection) throws -> String? {
        try connection.prepared("""
            SELECT coalesce(p.google_product_id, p.product_id)
            FROM wallet.credits c JOIN wallet.products p ON p.product_id = c.product_id
            WHERE c.purchase_token = \(purchaseToken)
            """).single.map { try $0.decode(String.self, at: 0) }
    }
}

extension Ledger {
    public func googlePlayProduct(of productID: ProductID, deadline: ContinuousClock.Instant) throws -> GooglePlayProduct? {
        try reads.run(deadline: deadline) { try LedgerStore.googlePlayProduct(of: productID, on: $0) }
    }

    public func creditedGoogleProductID(purchaseToken: String, deadline: ContinuousClock.Instant) throws -> String? {
        try reads.run(deadline: deadline) { try LedgerStore.creditedGoogleProductID(purchaseToken: purchaseToken, on: $0) }
    }

    public func credit(purchaseToken: String, deadline: ContinuousClock.Instant) throws -> LedgerStore.Credit? {
        try reads.run(deadline: deadline) { try LedgerStore.credit(purchaseToken: purchaseToken, on: $0) }
    }
}

/// One void Google reported for a purchase token.
public struct GooglePlayVoid: Sendable, Equatable {
    public var voidedAtMilliseconds: Int64
    /// 1: a full refund; 2: a quantity-based partial refund of `voidedQuantity`.
    public var refundType: Int
    public var voidedQuantity: Int?
    public var orderID: String?
    /// `push` or `sweep`: how it first arrived.
    public var source: String

    public init(voidedAtMilliseconds: Int64, refundType: Int, voidedQuantity: Int?, orderID: String?, source: String) {
        self.voidedAtMilliseconds = voidedAtMilliseconds
        self.refundType = refundType
        self.voidedQuantity = voidedQuantity
        self.orderID = orderID
        self.source = source
    }

    /// The JSON `wallet.apply_googleplay_voids` reads, written by the one
    /// JSON writer.
    var json: JSONValue {
        var fields: [(key: String, value: JSONValue)] = [
            ("voided_at_ms", JSONValue(voidedAtMilliseconds)), ("refund_type", JSONValue(refundType)),
            ("source", .string(source)),
        ]
        if let voidedQuantity { fields.append(("voided_quantity", JSONValue(voidedQuantity))) }
        if let orderID { fields.append(("order_id", .string(orderID))) }
        return .object(fields)
    }

    static func json(_ voids: [GooglePlayVoid]) -> String {
        JSONValue.array(voids.map(\.json)).serializedText()
    }
}

/// What applying Google's word on a purchase did.
public struct GooglePlayApplied: Sendable, Equatable {
    /// What `wallet.apply_googleplay_voids` or
    /// `wallet.apply_googleplay_notification` answered.
    public enum Outcome: String, Sendable, CaseIterable {
        /// A refund entry was written.
        case refunded
        /// The credit was refunded already: nothing left to refund.
        case alreadyRefunded = "already_refunded"
        /// The credit already stands where the voids put it.
        case unchanged
        /// The token was never credited: the voids are kept, and a later
        /// credit of it is refused as revoked.
        case revoked
        /// A notification kept without a balance change.
        case recorded
        /// A notification recorded before (by its messageId).
        case duplicate
    }

    public var outcome: Outcome
    public var entryID: Int64?
    /// Coins this call refunded.
    public var refundedCoins: Int64
}

/// A real-time developer notification as recorded.
public struct GooglePlayNotificationRecord: Sendable {
    public var messageID: String
    public var kind: String
    public var packageName: String
    public var eventTimeMilliseconds: Int64
    public var purchaseToken: String?
    public var orderID: String?
    /// The flowNO the purchase is (or would be) credited under.
    public var flowNo: String?
    /// The decoded notification, as JSON text.
    public var payloadJSON: String
    /// The voids to apply with it; nil for a notification that voids nothing.
    public var voids: [GooglePlayVoid]?

    public init(messageID: String, kind: String, packageName: String, eventTimeMilliseconds: Int64, purchaseToken: String?,
                orderID: String?, flowNo: String?, payloadJSON: String, voids: [GooglePlayVoid]?) {
        self.messageID = messageID
        self.kind = kind
        self.packageName = packageName
        self.eventTimeMilliseconds = eventTimeMilliseconds
        self.purchaseToken = purchaseToken
        self.orderID = orderID
        self.flowNo = flowNo
        self.payloadJSON = payloadJSON
        self.voids = voids
    }
}

extension LedgerStore {
    static func applyGooglePlayVoids(flowNo: String, purchaseToken: String, voids: [GooglePlayVoid],
                                     on connection: Connection) throws -> GooglePlayApplied {
        try applied(try connection.query("""
            SELECT outcome, entry_id, amount
            FROM wallet.apply_googleplay_voids(\(flowNo), \(purchaseToken), \(GooglePlayVoid.json(voids))::jsonb)
            """)[0])
    }

    static func applyGooglePlayNotification(_ record: GooglePlayNotificationRecord,
                                            on connection: Connection) throws -> GooglePlayApplied {
        try applied(try connection.query("""
            SELECT outcome, entry_id, amount FROM wallet.apply_googleplay_notification(
                \(record.messageID), \(record.kind), \(record.packageName), \(record.eventTimeMilliseconds)::bigint,
                \(record.purchaseToken), \(record.orderID), \(record.flowNo), \(record.payloadJSON)::jsonb,
                \(record.voids.map(GooglePlayVoid.json))::jsonb)
            """)[0])
    }

    private static func applied(_ row: Row) throws -> GooglePlayApplied {
        let text = try row.decode(String.self, at: 0)
        guard let outcome = GooglePlayApplied.Outcome(rawValue: text) else { throw StoreError.unknownOutcome(text) }
        return GooglePlayApplied(outcome: outcome, entryID: try row.decodeIfPresent(Int64.self, at: 1),
                                 refundedCoins: try row.decodeIfPresent(Int64.self, at: 2) ?? 0)
    }
}

extension Ledger {
    /// Brings a purchase's credit to Google's voids, by `deadline`.
    public func applyGooglePlayVoids(flowNo: String, purchaseToken: String, voids: [GooglePlayVoid],
                                     deadline: ContinuousClock.Instant) throws -> GooglePlayApplied {
        try writeBounded(.statement, pool: pool, metrics: metrics, deadline: deadline) {
            try LedgerStore.applyGooglePlayVoids(flowNo: flowNo, purchaseToken: purchaseToken, voids: voids, on: $0)
        }
    }

    /// Records a notification once (by its messageId) with its voids, by `deadline`.
    public func applyGooglePlayNotification(_ record: GooglePlayNotificationRecord,
                                            deadline: ContinuousClock.Instant) throws -> GooglePlayApplied {
        try writeBounded(.statement, pool: pool, metrics: metrics, deadline: deadline) {
            try LedgerStore.applyGooglePlayNotification(record, on: $0)
        }
    }
}
