import Foundation

/// A one-time product purchase as `purchases.products.get` returns it.
///
/// Google writes int64 fields (`purchaseTimeMillis`) as JSON strings; they
/// are read from a string or a number. Only `purchaseState` is required:
/// Google sets it on every purchase, and without it nothing can be decided.
public struct ProductPurchase: Sendable, Equatable, Decodable {
    /// 0 purchased, 1 canceled, 2 pending.
    public var purchaseState: Int
    /// 0 yet to be consumed, 1 consumed.
    public var consumptionState: Int?
    /// Absent for a purchase through the normal billing flow; 0 test
    /// (a license tester), 1 promo (a promo code), 2 rewarded (an ad watched).
    public var purchaseType: Int?
    /// Absent for promo-code purchases.
    public var orderId: String?
    /// Absent means 1.
    public var quantity: Int?
    /// What the app passed to `BillingFlowParams.Builder.setObfuscatedAccountId`.
    public var obfuscatedExternalAccountId: String?
    public var purchaseTimeMillis: Int64?
    /// 0 yet to be acknowledged, 1 acknowledged.
    public var acknowledgementState: Int?
    public var regionCode: String?
    public var refundableQuantity: Int?
    public var productId: String?

    public static let statePurchased = 0
    public static let stateCanceled = 1
    public static let statePending = 2

    public static let typeTest = 0
    public static let typePromo = 1
    public static let typeRewarded = 2

    public init(purchaseState: Int, consumptionState: Int? = nil, purchaseType: Int? = nil, orderId: String? = nil,
                quantity: Int? = nil, obfuscatedExternalAccountId: String? = nil, purchaseTimeMillis: Int64? = nil,
                acknowledgementState: Int? = nil, regionCode: String? = nil, refundableQuantity: Int? = nil,
                productId: String? = nil) {
        self.purchaseState = purchaseState
        self.consumptionState = consumptionState
        self.purchaseType = purchaseType
        self.orderId = orderId
        self.quantity = quantity
        self.obfuscatedExternalAccountId = obfuscatedExternalAccountId
        self.purchaseTimeMillis = purchaseTimeMillis
        self.acknowledgementState = acknowledgementState
        self.regionCode = regionCode
        self.refundableQuantity = refundableQuantity
        self.productId = productId
    }

    private enum CodingKeys: String, CodingKey {
        case purchaseState, consumptionState, purchaseType, orderId, quantity, obfuscatedExternalAccountId
        case purchaseTimeMillis, acknowledgementState, regionCode, refundableQuantity, productId
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        purchaseState = try container.decode(Int.self, forKey: .purchaseState)
        consumptionState = try container.decodeIfPresent(Int.self, forKey: .consumptionState)
        purchaseType = try container.decodeIfPresent(Int.self, forKey: .purchaseType)
        orderId = try container.decodeIfPresent(String.self, forKey: .orderId)
        quantity = try container.decodeIfPresent(Int.self, forKey: .quantity)
        obfuscatedExternalAccountId = try container.decodeIfPresent(String.self, forKey: .obfuscatedExternalAccountId)
        purchaseTimeMillis = try container.decodeInt64IfPresent(forKey: .purchaseTimeMillis)
        acknowledgementState = try container.decodeIfPresent(Int.self, forKey: .acknowledgementState)
        regionCode = try container.decodeIfPresent(String.self, forKey: .regionCode)
        refundableQuantity = try container.decodeIfPresent(Int.self, forKey: .refundableQuantity)
        productId = try container.decodeIfPresent(String.self, forKey: .productId)
    }
}

/// A purchase that was canceled, refunded or charged back, as
/// `purchases.voidedpurchases.list` returns it. Google documents exactly
/// these members: `kind`, `purchaseToken`, `purchaseTimeMillis`,
/// `voidedTimeMillis`, `orderId`, `voidedSource`, `voidedReason` and
/// `voidedQuantity`
/// (https://developers.google.com/android-publisher/api-ref/rest/v3/purchases.voidedpurchases).
/// There is no refund type here: that is only in the push. An entry with
/// `voidedQuantity` is a quantity-based partial refund of that many units
/// (listed only because every list call asks for them); one without is a
/// void of the whole purchase.
///
/// Decoding also refuses what the ledger could not store, each with a
/// reason that names the member and quotes nothing (`Unusable`): a token
/// of more than `GooglePlay.purchaseTokenBytesMax` bytes or not visible
/// ASCII, an order id of more than `GooglePlay.orderIDBytesMax`, a void
/// time outside 0...`GooglePlay.millisecondsMax`, a voided quantity below
/// 1. Its description leaves the purchase token out.
public struct VoidedPurchase: Sendable, Equatable, Decodable, CustomStringConvertible {
    public var purchaseToken: String
    /// Absent for a purchase without one (a promo code's).
    public var orderId: String?
    public var purchaseTimeMillis: Int64?
    /// When Google voided it.
    public var voidedTimeMillis: Int64
    /// 0 user, 1 developer, 2 Google.
    public var voidedSource: Int?
    /// 0 other, 1 remorse, 2 not received, 3 defective, 4 accidental
    /// purchase, 5 fraud, 6 friendly fraud, 7 chargeback, 8 unacknowledged
    /// purchase.
    public var voidedReason: Int?
    /// How many units a quantity-based partial refund took back; absent for
    /// a void of the whole purchase.
    public var voidedQuantity: Int?

    /// The largest voided quantity taken: the ledger's column is a 32-bit
    /// integer. The refund never exceeds the purchase's own quantity.
    public static let voidedQuantityMax = Int(Int32.max)

    public init(purchaseToken: String, orderId: String? = nil, purchaseTimeMillis: Int64? = nil,
                voidedTimeMillis: Int64, voidedSource: Int? = nil, voidedReason: Int? = nil, voidedQuantity: Int? = nil) {
        self.purchaseToken = purchaseToken
        self.orderId = orderId
        self.purchaseTimeMillis = purchaseTimeMillis
        self.voidedTimeMillis = voidedTimeMillis
        self.voidedSource = voidedSource
        self.voidedReason = voidedReason
        self.voidedQuantity = voidedQuantity
    }

    /// A quantity-based partial refund, not a void of the whole purchase.
    public var isPartial: Bool { voidedQuantity != nil }

    /// An entry that decodes but that the service does not take; `reason`
    /// names the member and the rule, never the value.
    public struct Unusable: Error, Sendable, Equatable, CustomStringConvertible {
        public let reason: String
        public var description: String { reason }
    }

    private enum CodingKeys: String, CodingKey {
        case purchaseToken, orderId, purchaseTimeMillis, voidedTimeMillis, voidedSource, voidedReason, voidedQuantity
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        purchaseToken = try container.decode(String.self, forKey: .purchaseToken)
        let order = try container.decodeIfPresent(String.self, forKey: .orderId)
        orderId = order?.isEmpty == false ? order : nil
        purchaseTimeMillis = try container.decodeInt64IfPresent(forKey: .purchaseTimeMillis)
        guard let voided = try container.decodeInt64IfPresent(forKey: .voidedTimeMillis) else {
            throw DecodingError.keyNotFound(CodingKeys.voidedTimeMillis, .init(
                codingPath: container.codingPath, debugDescription: "voidedTimeMillis is required"))
        }
        voidedTimeMillis = voided
        voidedSource = try container.decodeIfPresent(Int.self, forKey: .voidedSource)
        voidedReason = try container.decodeIfPresent(Int.self, forKey: .voidedReason)
        voidedQuantity = try container.decodeIfPresent(Int.self, forKey: .voidedQuantity)
        if let unusable = problem { throw unusable }
    }

    /// The first rule the entry breaks, or nil.
    var problem: Unusable? {
        if !GooglePlay.isVisibleASCII(purchaseToken, bytesMax: GooglePlay.purchaseTokenBytesMax) {
            return Unusable(reason: "purchaseToken is empty, longer than \(GooglePlay.purchaseTokenBytesMax) bytes, "
                                + "or not visible ASCII")
        }
        if let orderId, !GooglePlay.isVisibleASCII(orderId, bytesMax: GooglePlay.orderIDBytesMax) {
            return Unusable(reason: "orderId is longer than \(GooglePlay.orderIDBytesMax) bytes, or not visible ASCII")
        }
        if !(0...GooglePlay.millisecondsMax).contains(voidedTimeMillis) {
            return Unusable(reason: "voidedTimeMillis is before 1970 or after the year 9999")
        }
        if let voidedQuantity, !(1...Self.voidedQuantityMax).contains(voidedQuantity) {
            return Unusable(reason: "voidedQuantity is below 1 or above \(Self.voidedQuantityMax)")
        }
        return nil
    }

    public var description: String {
        "VoidedPurchase(orderId: \(orderId ?? "none"), voidedTimeMillis: \(voidedTimeMillis), voidedQuantity: "
            + "\(voidedQuantity.map(String.init) ?? "none"))"
    }
}

/// A voided-purchases entry the service did not take: where it was, when
/// it was voided (when that much could be read), and why. Never the token.
public struct VoidedEntryRefusal: Sendable, Equatable, CustomStringConvertible {
    /// Its place in its page, from 0.
    public var index: Int
    public var voidedTimeMillis: Int64?
    public var reason: String

    public init(index: Int, voidedTimeMillis: Int64?, reason: String) {
        self.index = index
        self.voidedTimeMillis = voidedTimeMillis
        self.reason = reason
    }

    public var description: String { "voided purchase \(index) of its page: \(reason)" }
}

/// One page of voided purchases; `nextPageToken` is nil on the last. An
/// entry that does not decode, or breaks a rule of `VoidedPurchase`, is
/// kept aside in `refused` and the rest of the page is read: one odd entry
/// must not hide the others.
public struct VoidedPage: Sendable, Equatable, Decodable {
    public var purchases: [VoidedPurchase]
    public var refused: [VoidedEntryRefusal]
    public var nextPageToken: String?

    public init(purchases: [VoidedPurchase], refused: [VoidedEntryRefusal] = [], nextPageToken: String?) {
        self.purchases = purchases
        self.refused = refused
        self.nextPageToken = nextPageToken
    }

    private enum CodingKeys: String, CodingKey {
        case voidedPurchases, tokenPagination
    }

    private enum PaginationKeys: String, CodingKey {
        case nextPageToken
    }

    /// One entry, decoded or refused.
    private struct Entry: Decodable {
        var result: Result<VoidedPurchase, VoidedPurchase.Unusable>
        var voidedTimeMillis: Int64?

        private enum TimeKeys: String, CodingKey {
            case voidedTimeMillis
        }

        init(from decoder: any Decoder) throws {
            do {
                let purchase = try VoidedPurchase(from: decoder)
                result = .success(purchase)
                voidedTimeMillis = purchase.voidedTimeMillis
            } catch let unusable as VoidedPurchase.Unusable {
                result = .failure(unusable)
                voidedTimeMillis = Self.time(decoder)
            } catch {
                result = .failure(VoidedPurchase.Unusable(reason: Self.reason(error)))
                voidedTimeMillis = Self.time(decoder)
            }
        }

        /// Where the entry failed to decode, by member name only.
        private static func reason(_ error: any Error) -> String {
            let context: DecodingError.Context
            switch error as? DecodingError {
            case .keyNotFound(let key, _):
                return "no \(key.stringValue)"
            case .typeMismatch(_, let found), .valueNotFound(_, let found), .dataCorrupted(let found):
                context = found
            default:
                return "not a JSON object"
            }
            guard let last = context.codingPath.last, last.intValue == nil else { return "not a JSON object" }
            return "\(last.stringValue) has the wrong type"
        }

        private static func time(_ decoder: any Decoder) -> Int64? {
            guard let container = try? decoder.container(keyedBy: TimeKeys.self) else { return nil }
            return (try? container.decodeInt64IfPresent(forKey: .voidedTimeMillis)) ?? nil
        }
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        let entries = try container.decodeIfPresent([Entry].self, forKey: .voidedPurchases) ?? []
        purchases = []
        refused = []
        for (index, entry) in entries.enumerated() {
            switch entry.result {
            case .success(let purchase): purchases.append(purchase)
            case .failure(let unusable):
                refused.append(VoidedEntryRefusal(index: index, voidedTimeMillis: entry.voidedTimeMillis,
                                                  reason: unusable.reason))
            }
        }
        if container.contains(.tokenPagination), try !container.decodeNil(forKey: .tokenPagination) {
            let pagination = try container.nestedContainer(keyedBy: PaginationKeys.self, forKey: .tokenPagination)
            let next = try pagination.decodeIfPresent(String.self, forKey: .nextPageToken)
            nextPageToken = next?.isEmpty == false ? next : nil
        } else {
            nextPageToken = nil
        }
    }
}

extension KeyedDecodingContainer {
    /// An int64 that Google writes as a decimal string; a JSON number is
    /// accepted too.
    fileprivate func decodeInt64IfPresent(forKey key: Key) throws -> Int64? {
        guard contains(key), try !decodeNil(forKey: key) else { return nil }
        if let text = try? decode(String.self, forKey: key) {
            guard let value = Int64(text) else {
                throw DecodingError.dataCorruptedError(forKey: key, in: self, debugDescription: "not an int64")
            }
            return value
        }
        return try decode(Int64.self, forKey: key)
    }
}
