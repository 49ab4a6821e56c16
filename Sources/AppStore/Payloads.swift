public import Foundation

// Decoded App Store payloads. Field names and meanings follow Apple's
// documentation (JWSTransactionDecodedPayload, JWSRenewalInfoDecodedPayload,
// responseBodyV2DecodedPayload). Fields Apple sends on every payload of the
// kind are required; the rest are optional. Unknown fields are ignored.
//
// Dates are UNIX time in milliseconds, as Apple sends them. Prices are in
// milliunits of `currency` (4990 = 4.99).

/// A signed transaction (JWSTransactionDecodedPayload).
public struct TransactionPayload: Decodable, Sendable, Equatable {
    public let transactionId: String
    public let originalTransactionId: String
    public let webOrderLineItemId: String?
    public let bundleId: String
    public let productId: String
    public let subscriptionGroupIdentifier: String?
    /// Milliseconds since 1970.
    public let purchaseDate: Int64
    /// Milliseconds since 1970.
    public let originalPurchaseDate: Int64?
    /// Milliseconds since 1970; subscriptions only.
    public let expiresDate: Int64?
    /// How many of the product were bought, 1...10 by Apple's documentation.
    /// Apple's own libraries treat it as optional; `CreditPolicy` reads an
    /// absent value as 1.
    public let quantity: Int?
    public let type: ProductType
    /// The UUID the app attached to the purchase, as Apple sent it. See
    /// `appAccountTokenUUID` for the parsed form.
    public let appAccountToken: String?
    /// `PURCHASED` or `FAMILY_SHARED`.
    public let inAppOwnershipType: String?
    /// Milliseconds since 1970: when the App Store signed this payload.
    public let signedDate: Int64
    /// 0: refunded for another reason; 1: refunded because of an issue in the app.
    public let revocationReason: Int?
    /// Milliseconds since 1970: when the App Store refunded or revoked it.
    public let revocationDate: Int64?
    /// `REFUND_FULL`, `REFUND_PRORATED` or `FAMILY_REVOKE`.
    public let revocationType: String?
    /// Share refunded or revoked, in milliunits of a percent (100000 = 100 %).
    public let revocationPercentage: Int?
    public let isUpgraded: Bool?
    public let offerType: Int?
    public let offerIdentifier: String?
    public let offerDiscountType: String?
    public let offerPeriod: String?
    public let environment: Environment
    public let storefront: String?
    public let storefrontId: String?
    /// `PURCHASE` or `RENEWAL`.
    public let transactionReason: String?
    /// Milliunits of `currency`.
    public let price: Int64?
    /// ISO 4217 code.
    public let currency: String?
    public let appTransactionId: String?

    public var appAccountTokenUUID: UUID? {
        appAccountToken.flatMap(UUID.init(uuidString:))
    }
}

/// Signed subscription renewal information (JWSRenewalInfoDecodedPayload).
/// It carries no bundle identifier; only its environment can be checked.
public struct RenewalInfoPayload: Decodable, Sendable, Equatable {
    public let originalTransactionId: String
    public let autoRenewProductId: String?
    public let productId: String?
    /// 0: off, 1: on.
    public let autoRenewStatus: Int?
    public let expirationIntent: Int?
    /// Milliseconds since 1970.
    public let gracePeriodExpiresDate: Int64?
    public let isInBillingRetryPeriod: Bool?
    public let offerIdentifier: String?
    public let offerType: Int?
    public let offerDiscountType: String?
    public let offerPeriod: String?
    public let priceIncreaseStatus: Int?
    /// Milliseconds since 1970.
    public let signedDate: Int64
    public let environment: Environment
    /// Milliseconds since 1970.
    public let recentSubscriptionStartDate: Int64?
    /// Milliseconds since 1970.
    public let renewalDate: Int64?
    /// Milliunits of `currency`.
    public let renewalPrice: Int64?
    public let currency: String?
    public let eligibleWinBackOfferIds: [String]?
    public let appAccountToken: String?
    public let appTransactionId: String?
}

/// An App Store Server Notification V2 (responseBodyV2DecodedPayload).
public struct NotificationPayload: Decodable, Sendable, Equatable {
    /// Such as `ONE_TIME_CHARGE`, `REFUND`, `REFUND_REVERSED`, `CONSUMPTION_REQUEST`, `TEST`.
    public let notificationType: String
    public let subtype: String?
    public let notificationUUID: String
    public let version: String?
    /// Milliseconds since 1970.
    public let signedDate: Int64
    /// App metadata and the nested signed transaction and renewal info.
    public let data: NotificationData?
    /// Present instead of `data` for subscription-renewal-date-extension summaries.
    public let summary: NotificationSummary?

    /// The `data` object of a notification.
    public struct NotificationData: Decodable, Sendable, Equatable {
        public let environment: Environment
        public let appAppleId: Int64?
        public let bundleId: String
        public let bundleVersion: String?
        /// The nested signed transaction, as received. `VerifiedNotification`
        /// holds its verified, decoded form.
        public let signedTransactionInfo: String?
        /// The nested signed renewal info, as received.
        public let signedRenewalInfo: String?
        /// Subscription status: 1 active, 2 expired, 3 billing retry, 4 grace period, 5 revoked.
        public let status: Int?
        /// Why the customer asked for a refund (`CONSUMPTION_REQUEST` only).
        public let consumptionRequestReason: String?
    }

    /// The `summary` object of a `RENEWAL_EXTENSION` summary notification.
    public struct NotificationSummary: Decodable, Sendable, Equatable {
        public let environment: Environment
        public let appAppleId: Int64?
        public let bundleId: String
        public let productId: String?
        public let requestIdentifier: String
        public let storefrontCountryCodes: [String]?
        public let succeededCount: Int64?
        public let failedCount: Int64?
    }
}

/// A transaction whose signature, chain and claims all checked out.
public struct VerifiedTransaction: Sendable {
    public let payload: TransactionPayload
    /// The payload JSON exactly as signed.
    public let payloadJSON: Data
}

/// Renewal info whose signature, chain and environment all checked out.
public struct VerifiedRenewalInfo: Sendable {
    public let payload: RenewalInfoPayload
    /// The payload JSON exactly as signed.
    public let payloadJSON: Data
}

/// A notification whose signature, chain and claims all checked out, along
/// with its nested tokens, each verified on its own.
public struct VerifiedNotification: Sendable {
    public let payload: NotificationPayload
    /// The payload JSON exactly as signed.
    public let payloadJSON: Data
    /// `data.signedTransactionInfo`, verified and decoded.
    public let transaction: VerifiedTransaction?
    /// `data.signedRenewalInfo`, verified and decoded.
    public let renewalInfo: VerifiedRenewalInfo?
}

/// Any verified payload, for callers that do not know the kind in advance.
public enum VerifiedSignedData: Sendable {
    case transaction(VerifiedTransaction)
    case renewalInfo(VerifiedRenewalInfo)
    case notification(VerifiedNotification)
}
