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
/// `purchases.voidedpurchases.list` returns it. Its description leaves the
/// purchase token out.
public struct VoidedPurchase: Sendable, Equatable, Decodable, CustomStringConvertible {
    public var purchaseToken: String
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
    /// 1 the whole purchase, 2 part of its quantity (`voidedQuantity`).
    public var refundType: Int?
    /// How many units a quantity-based partial refund took back.
    public var voidedQuantity: Int?

    public static let refundTypeFull = 1
    public static let refundTypeQuantityBasedPartial = 2

    public init(purchaseToken: String, orderId: String? = nil, purchaseTimeMillis: Int64? = nil,
                voidedTimeMillis: Int64, voidedSource: Int? = nil, voidedReason: Int? = nil, refundType: Int? = nil,
                voidedQuantity: Int? = nil) {
        self.purchaseToken = purchaseToken
        self.orderId = orderId
        self.purchaseTimeMillis = purchaseTimeMillis
        self.voidedTimeMillis = voidedTimeMillis
        self.voidedSource = voidedSource
        self.voidedReason = voidedReason
        self.refundType = refundType
        self.voidedQuantity = voidedQuantity
    }

    private enum CodingKeys: String, CodingKey {
        case purchaseToken, orderId, purchaseTimeMillis, voidedTimeMillis, voidedSource, voidedReason, refundType
        case voidedQuantity
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        purchaseToken = try container.decode(String.self, forKey: .purchaseToken)
        orderId = try container.decodeIfPresent(String.self, forKey: .orderId)
        purchaseTimeMillis = try container.decodeInt64IfPresent(forKey: .purchaseTimeMillis)
        guard let voided = try container.decodeInt64IfPresent(forKey: .voidedTimeMillis) else {
            throw DecodingError.keyNotFound(CodingKeys.voidedTimeMillis, .init(
                codingPath: container.codingPath, debugDescription: "voidedTimeMillis is required"))
        }
        voidedTimeMillis = voided
        voidedSource = try container.decodeIfPresent(Int.self, forKey: .voidedSource)
        voidedReason = try container.decodeIfPresent(Int.self, forKey: .voidedReason)
        refundType = try container.decodeIfPresent(Int.self, forKey: .refundType)
        voidedQuantity = try container.decodeIfPresent(Int.self, forKey: .voidedQuantity)
    }

    public var description: String {
        "VoidedPurchase(orderId: \(orderId ?? "none"), voidedTimeMillis: \(voidedTimeMillis), "
            + "refundType: \(refundType.map(String.init) ?? "none"), voidedQuantity: "
            + "\(voidedQuantity.map(String.init) ?? "none"))"
    }
}

/// One page of voided purchases; `nextPageToken` is nil on the last.
public struct VoidedPage: Sendable, Equatable, Decodable {
    public var purchases: [VoidedPurchase]
    public var nextPageToken: String?

    public init(purchases: [VoidedPurchase], nextPageToken: String?) {
        self.purchases = purchases
        self.nextPageToken = nextPageToken
    }

    private enum CodingKeys: String, CodingKey {
        case voidedPurchases, tokenPagination
    }

    private enum PaginationKeys: String, CodingKey {
        case nextPageToken
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        purchases = try container.decodeIfPresent([VoidedPurchase].self, forKey: .voidedPurchases) ?? []
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
