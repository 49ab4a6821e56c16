public import Postgres
public import WalletCore

// The fixed sets of values the ledger's text columns and its functions'
// answers hold, read once where they come from SQL: each is decoded into
// its enum by the one rule in `Postgres` (an unknown value is a decoding
// error) and sent back as its raw value. Nothing above the store compares
// one of these as text.

extension CreditStatus: PostgresDecodable, PostgresEncodable {}
extension CreditSource: PostgresDecodable, PostgresEncodable {}
extension HoldStatus: PostgresDecodable, PostgresEncodable {}
extension HoldAction: PostgresDecodable, PostgresEncodable {}
extension EntryKind: PostgresDecodable, PostgresEncodable {}
extension EventType: PostgresDecodable, PostgresEncodable {}
extension WebhookDeliveryStatus: PostgresDecodable, PostgresEncodable {}
extension PurchaseEnvironment: PostgresDecodable, PostgresEncodable {}
extension RefusalReason: PostgresDecodable, PostgresEncodable {}
extension Scope: PostgresDecodable, PostgresEncodable {}
extension GooglePlayNotificationKind: PostgresDecodable, PostgresEncodable {}

/// What `wallet.apply_appstore_notification` did with a notification, as it
/// answers and as `wallet.appstore_notifications.outcome` keeps it (every
/// case but `duplicate`, which is never recorded twice).
public enum AppStoreNotificationOutcome: String, Sendable, CaseIterable, PostgresDecodable, PostgresEncodable {
    /// A REFUND of a credited consumable: a refund entry, the credit refunded.
    case refunded
    /// A REFUND of a credit refunded already: nothing changes.
    case alreadyRefunded = "already_refunded"
    /// A REFUND_REVERSED of Apple's refund: a refund_reversal entry, the
    /// credit credited again.
    case reversed
    /// A REFUND_REVERSED with nothing refunded to reverse.
    case notRefunded = "not_refunded"
    /// A REFUND_REVERSED of a refund that was not Apple's.
    case notReversible = "not_reversible"
    /// A REFUND of a flowNO never credited: remembered, so a credit of it is
    /// refused.
    case revoked
    /// Anything else: kept, with no balance change.
    case recorded
    /// This notificationUUID was seen before: nothing changes.
    case duplicate
    /// Older than the flowNO's decisive REFUND or REFUND_REVERSED: nothing changes.
    case superseded
    /// A REFUND_REVERSED that lifts Apple's revocation of a flowNO never credited.
    case unrevoked
}

/// How a Google Play void first reached the ledger: `wallet.googleplay_voids.source`.
public enum GooglePlayVoidSource: String, Sendable, CaseIterable, PostgresDecodable, PostgresEncodable {
    /// A real-time developer notification, confirmed by Google.
    case push
    /// The voided-purchases sweep.
    case sweep
}

/// A Google Play void's refund type: `wallet.googleplay_voids.refund_type`.
public enum GooglePlayRefundType: Int, Sendable, CaseIterable {
    /// A void of the whole purchase.
    case full = 1
    /// A quantity-based partial refund of `voidedQuantity` units.
    case partial = 2

    /// As the console names it.
    public var name: String {
        switch self {
        case .full: "full"
        case .partial: "partial"
        }
    }
}

extension GooglePlayRefundType: PostgresDecodable, PostgresEncodable {
    public init(postgresText text: String) throws(PostgresError) {
        guard let value = Int(text).flatMap(Self.init(rawValue:)) else {
            throw PostgresError(kind: .decoding, serverMessage: "a Google Play refund type is 1 or 2, not \(text.prefix(8))")
        }
        self = value
    }

    public var postgresText: String? { String(rawValue) }
}

/// Who refunded a credit: `wallet.credits.refunded_by`.
public enum Refunder: String, Sendable, CaseIterable, PostgresDecodable, PostgresEncodable {
    case apple, admin, google
}

/// What an operator did, as `wallet.admin_audit.action` records it.
public enum AuditAction: String, Sendable, CaseIterable, PostgresDecodable, PostgresEncodable {
    case refund, grant, revoke, product
    case releaseHold = "release_hold"
    case revokeKey = "revoke_key"
    case webhookAdd = "webhook_add"
    case webhookDisable = "webhook_disable"
    case webhookEnable = "webhook_enable"
    /// An unclaimed purchase credited by hand (Scripts/admin/claim.sql).
    case claim
    /// A currency added or renamed (Scripts/admin/currency.sql).
    case currency
}

/// The type of Apple's decisive refund notification for a flowNO:
/// `wallet.appstore_refund_states.notification_type`.
public enum AppleRefundNotification: String, Sendable, CaseIterable, PostgresDecodable, PostgresEncodable {
    case refund = "REFUND"
    case refundReversed = "REFUND_REVERSED"
}
