import Foundation
import JSON
public import Postgres
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

    /// The Google Play id of the first active product by catalog id; nil
    /// when none is on sale.
    static func googlePlayProductIDOnSale(on connection: Connection) throws -> String? {
        try connection.query("""
            SELECT coalesce(google_product_id, product_id) FROM wallet.products
            WHERE active ORDER BY product_id LIMIT 1
            """).single.map { try $0.decode(String.self, at: 0) }
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
    /// A partial one is a quantity-based partial refund of `voidedQuantity`.
    public var refundType: GooglePlayRefundType
    public var voidedQuantity: Int?
    public var orderID: String?
    /// How it first arrived.
    public var source: GooglePlayVoidSource

    public init(voidedAtMilliseconds: Int64, refundType: GooglePlayRefundType, voidedQuantity: Int?, orderID: String?,
                source: GooglePlayVoidSource) {
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
            ("voided_at_ms", JSONValue(voidedAtMilliseconds)), ("refund_type", JSONValue(refundType.rawValue)),
            ("source", .string(source.rawValue)),
        ]
        if let voidedQuantity { fields.append(("voided_quantity", JSONValue(voidedQuantity))) }
        if let orderID { fields.append(("order_id", .string(orderID))) }
        return .object(fields)
    }

    static func json(_ voids: [GooglePlayVoid]) -> String {
        JSONValue.array(voids.map(\.json)).serializedText()
    }
}

/// What `wallet.apply_googleplay_voids` did with a purchase's voids.
public enum GooglePlayVoidOutcome: String, Sendable, CaseIterable, PostgresDecodable, PostgresEncodable {
    /// A refund entry was written.
    case refunded
    /// The credit was refunded already: nothing left to refund.
    case alreadyRefunded = "already_refunded"
    /// The credit already stands where the voids put it.
    case unchanged
    /// The token was never credited: the voids are kept, and a later
    /// credit of it is refused as revoked.
    case revoked
}

/// What `wallet.apply_googleplay_notification` did with a notification, as
/// it answers and as `wallet.googleplay_notifications.outcome` keeps it
/// (every case but `duplicate`): what applying its voids did, or neither.
public enum GooglePlayNotificationOutcome: Hashable, Sendable, CaseIterable, RawRepresentable, PostgresDecodable,
                                           PostgresEncodable {
    /// Its voids were applied, with this outcome.
    case voids(GooglePlayVoidOutcome)
    /// Kept without a balance change.
    case recorded
    /// Recorded before (by its messageId): nothing changes.
    case duplicate

    public static var allCases: [Self] { GooglePlayVoidOutcome.allCases.map(Self.voids) + [.recorded, .duplicate] }

    public init?(rawValue: String) {
        switch rawValue {
        case "recorded": self = .recorded
        case "duplicate": self = .duplicate
        default:
            guard let outcome = GooglePlayVoidOutcome(rawValue: rawValue) else { return nil }
            self = .voids(outcome)
        }
    }

    public var rawValue: String {
        switch self {
        case .voids(let outcome): outcome.rawValue
        case .recorded: "recorded"
        case .duplicate: "duplicate"
        }
    }
}

/// What applying Google's word on a purchase did: `Outcome` is one of the
/// two enums above.
public struct GooglePlayApplied<Outcome: Sendable & Equatable>: Sendable, Equatable {
    public var outcome: Outcome
    public var entryID: Int64?
    /// Coins this call refunded.
    public var refundedCoins: Int64
}

/// A real-time developer notification as recorded.
public struct GooglePlayNotificationRecord: Sendable {
    public var messageID: String
    public var kind: GooglePlayNotificationKind
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

    public init(messageID: String, kind: GooglePlayNotificationKind, packageName: String, eventTimeMilliseconds: Int64, purchaseToken: String?,
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
                                     on connection: Connection) throws -> GooglePlayApplied<GooglePlayVoidOutcome> {
        try applied(try connection.query("""
            SELECT outcome, entry_id, amount
            FROM wallet.apply_googleplay_voids(\(flowNo), \(purchaseToken), \(GooglePlayVoid.json(voids))::jsonb)
            """)[0])
    }

    static func applyGooglePlayNotification(_ record: GooglePlayNotificationRecord,
                                            on connection: Connection) throws
        -> GooglePlayApplied<GooglePlayNotificationOutcome> {
        try applied(try connection.query("""
            SELECT outcome, entry_id, amount FROM wallet.apply_googleplay_notification(
                \(record.messageID), \(record.kind), \(record.packageName), \(record.eventTimeMilliseconds)::bigint,
                \(record.purchaseToken), \(record.orderID), \(record.flowNo), \(record.payloadJSON)::jsonb,
                \(record.voids.map(GooglePlayVoid.json))::jsonb)
            """)[0])
    }

    private static func applied<Outcome: PostgresDecodable>(_ row: Row) throws -> GooglePlayApplied<Outcome> {
        GooglePlayApplied(outcome: try row.decode(Outcome.self, at: 0), entryID: try row.decodeIfPresent(Int64.self, at: 1),
                          refundedCoins: try row.decodeIfPresent(Int64.self, at: 2) ?? 0)
    }
}

extension Ledger {
    /// Brings a purchase's credit to Google's voids, by `deadline`.
    public func applyGooglePlayVoids(flowNo: String, purchaseToken: String, voids: [GooglePlayVoid],
                                     deadline: ContinuousClock.Instant) throws -> GooglePlayApplied<GooglePlayVoidOutcome> {
        try writeBounded(.statement, pool: pool, metrics: metrics, deadline: deadline) {
            try LedgerStore.applyGooglePlayVoids(flowNo: flowNo, purchaseToken: purchaseToken, voids: voids, on: $0)
        }
    }

    /// Records a notification once (by its messageId) with its voids, by `deadline`.
    public func applyGooglePlayNotification(_ record: GooglePlayNotificationRecord,
                                            deadline: ContinuousClock.Instant) throws
        -> GooglePlayApplied<GooglePlayNotificationOutcome> {
        try writeBounded(.statement, pool: pool, metrics: metrics, deadline: deadline) {
            try LedgerStore.applyGooglePlayNotification(record, on: $0)
        }
    }
}
