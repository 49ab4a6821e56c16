public import Foundation

/// A time as the service writes it: RFC 3339 in UTC with microseconds
/// (`2026-12-02T12:45:46.195317Z`). The text is kept exactly, since a
/// `Date` cannot hold every microsecond; `date` parses it.
public struct Timestamp: Sendable, Hashable, Codable, CustomStringConvertible {
    public let text: String

    public init(_ text: String) {
        self.text = text
    }

    public init(from decoder: any Decoder) throws {
        text = try decoder.singleValueContainer().decode(String.self)
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(text)
    }

    /// The instant, or nil if the text is not RFC 3339.
    public var date: Date? {
        if let date = try? Date(text, strategy: Date.ISO8601FormatStyle(includingFractionalSeconds: true)) {
            return date
        }
        return try? Date(text, strategy: Date.ISO8601FormatStyle())
    }

    public var description: String { text }
}

/// A string with a documented set of values that the service may extend:
/// the known values are constants, and a value this client does not know
/// still decodes, as itself.
public protocol OpenStringValue: RawRepresentable, Sendable, Hashable, Codable, CustomStringConvertible,
    ExpressibleByStringLiteral where RawValue == String {
    init(rawValue: String)
}

extension OpenStringValue {
    public init(stringLiteral value: String) {
        self.init(rawValue: value)
    }

    public init(from decoder: any Decoder) throws {
        self.init(rawValue: try decoder.singleValueContainer().decode(String.self))
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(rawValue)
    }

    public var description: String { rawValue }
}

/// A hold's state.
public struct HoldStatus: OpenStringValue {
    public let rawValue: String
    public init(rawValue: String) { self.rawValue = rawValue }

    public static let held: HoldStatus = "held"
    public static let captured: HoldStatus = "captured"
    public static let released: HoldStatus = "released"
    public static let expired: HoldStatus = "expired"
}

/// The `status` filter of `listHolds`: `active` is a hold still held and
/// not past its time.
public struct HoldFilter: OpenStringValue {
    public let rawValue: String
    public init(rawValue: String) { self.rawValue = rawValue }

    public static let active: HoldFilter = "active"
    public static let captured: HoldFilter = "captured"
    public static let released: HoldFilter = "released"
    public static let expired: HoldFilter = "expired"
}

/// A credit's state: refunded in part (Google Play, by quantity) or in full.
public struct CreditStatus: OpenStringValue {
    public let rawValue: String
    public init(rawValue: String) { self.rawValue = rawValue }

    public static let credited: CreditStatus = "credited"
    public static let partiallyRefunded: CreditStatus = "partially_refunded"
    public static let refunded: CreditStatus = "refunded"
}

/// How a purchase was verified.
public struct CreditSource: OpenStringValue {
    public let rawValue: String
    public init(rawValue: String) { self.rawValue = rawValue }

    public static let caller: CreditSource = "caller"
    public static let appStoreJWS: CreditSource = "appstore-jws"
    public static let appStoreReceipt: CreditSource = "appstore-receipt"
    public static let appStoreAPI: CreditSource = "appstore-api"
    public static let appStoreNotification: CreditSource = "appstore-notification"
    public static let googlePlay: CreditSource = "googleplay"
}

/// What a ledger entry records.
public struct EntryKind: OpenStringValue {
    public let rawValue: String
    public init(rawValue: String) { self.rawValue = rawValue }

    public static let credit: EntryKind = "credit"
    public static let debit: EntryKind = "debit"
    public static let refund: EntryKind = "refund"
    public static let refundReversal: EntryKind = "refund_reversal"
    public static let grant: EntryKind = "grant"
    public static let revoke: EntryKind = "revoke"
    public static let expire: EntryKind = "expire"
    public static let bonus: EntryKind = "bonus"
}

/// The type of an event in the feed.
public struct EventType: OpenStringValue {
    public let rawValue: String
    public init(rawValue: String) { self.rawValue = rawValue }

    public static let creditCreated: EventType = "credit.created"
    public static let creditRefunded: EventType = "credit.refunded"
    public static let creditRefundReversed: EventType = "credit.refund_reversed"
    public static let debitCreated: EventType = "debit.created"
    public static let holdPlaced: EventType = "hold.placed"
    public static let holdCaptured: EventType = "hold.captured"
    public static let holdReleased: EventType = "hold.released"
    public static let holdExpired: EventType = "hold.expired"
    public static let grantCreated: EventType = "grant.created"
    public static let revokeCreated: EventType = "revoke.created"
    public static let balanceNegative: EventType = "balance.negative"
    public static let coinsExpired: EventType = "coins.expired"
    public static let bonusCreated: EventType = "bonus.created"
}

/// The store's evidence of a purchase; a credit carries one kind at most.
public enum PurchaseEvidence: Sendable, Hashable {
    /// A StoreKit 2 signed transaction (compact JWS); mode `appstore-jws`.
    case signedTransaction(String)
    /// A StoreKit 1 app receipt, base64; mode `appstore-receipt`.
    case receiptData(String)
    /// A Google Play purchase token of a one-time product; mode `googleplay`.
    case googlePurchaseToken(String)
}

extension KeyedDecodingContainer {
    /// A member the document requires but allows to be null: null is nil,
    /// and a missing member is an error, never a default.
    func decodeNullable<Value: Decodable>(_ type: Value.Type, forKey key: Key) throws -> Value? {
        guard contains(key) else {
            throw DecodingError.keyNotFound(key, .init(
                codingPath: codingPath,
                debugDescription: "the required member \(key.stringValue) is missing (it may be null, not absent)"))
        }
        return try decodeNil(forKey: key) ? nil : decode(Value.self, forKey: key)
    }
}

extension KeyedEncodingContainer {
    /// Writes a required, nullable member: null rather than nothing.
    mutating func encodeNullable<Value: Encodable>(_ value: Value?, forKey key: Key) throws {
        if let value { try encode(value, forKey: key) } else { try encodeNil(forKey: key) }
    }
}
