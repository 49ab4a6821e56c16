import JSON
public import WalletCore

/// What the service answers Apple's consumption request for one purchase:
/// the body of Send Consumption Information (version 2), from what the
/// ledger knows of the purchase and the operator's refund preference.
public struct ConsumptionAnswer: Sendable, Equatable {
    /// What the operator asks Apple to do with a refund request
    /// (`WALLET_APPLE_REFUND_PREFERENCE`).
    public enum Preference: String, Sendable, CaseIterable {
        case decline
        case grantFull = "grant_full"
        case grantProrated = "grant_prorated"
        /// Grant in full when nothing was consumed or delivered, decline when
        /// everything was consumed, prorate between.
        case auto
    }

    /// Apple's `deliveryStatus` values the service sends.
    public enum DeliveryStatus: String, Sendable {
        case delivered = "DELIVERED"
        case undeliveredOther = "UNDELIVERED_OTHER"
    }

    /// Apple's `refundPreference` values.
    public enum RefundPreference: String, Sendable {
        case decline = "DECLINE"
        case grantFull = "GRANT_FULL"
        case grantProrated = "GRANT_PRORATED"
    }

    public var deliveryStatus: DeliveryStatus
    /// Milliunits (100000 = all consumed); only with `DELIVERED`.
    public var consumptionPercentage: Int?
    public var refundPreference: RefundPreference

    /// `creditStatus` is the credit's status, nil when never credited.
    public init(creditStatus: CreditStatus?, creditedAmount: Int64?, balance: Int64?, preference: Preference) {
        if creditStatus == .credited, let amount = creditedAmount, amount > 0 {
            deliveryStatus = .delivered
            let left = min(max(balance ?? 0, 0), amount)
            // At most 10^12 coins × 10^5: well inside Int64.
            consumptionPercentage = Int((amount - left) * 100_000 / amount)
        } else {
            deliveryStatus = .undeliveredOther
            consumptionPercentage = nil
        }
        switch preference {
        case .decline: refundPreference = .decline
        case .grantFull: refundPreference = .grantFull
        case .grantProrated: refundPreference = .grantProrated
        case .auto:
            switch consumptionPercentage {
            case nil, 0: refundPreference = .grantFull
            case 100_000: refundPreference = .decline
            default: refundPreference = .grantProrated
            }
        }
    }

    /// The JSON body, keys in a fixed order.
    public var json: String {
        var members: [(key: String, value: JSONValue)] = [("customerConsented", true)]
        if let consumptionPercentage { members.append(("consumptionPercentage", JSONValue(consumptionPercentage))) }
        members.append(("deliveryStatus", .string(deliveryStatus.rawValue)))
        members.append(("refundPreference", .string(refundPreference.rawValue)))
        members.append(("sampleContentProvided", false))
        return JSONValue.object(members).serializedText()
    }
}
