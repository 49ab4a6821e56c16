/// The App Store server environment a signed payload belongs to.
///
/// Modeled as an open set of raw strings, because Apple adds values and a
/// payload must still decode so that it can be refused with a clear reason.
public struct Environment: RawRepresentable, Hashable, Sendable, Codable, CustomStringConvertible {
    public let rawValue: String

    public init(rawValue: String) {
        self.rawValue = rawValue
    }

    public static let production = Environment(rawValue: "Production")
    public static let sandbox = Environment(rawValue: "Sandbox")
    /// StoreKit Testing in Xcode: signed by a local key, never by the App Store.
    public static let xcode = Environment(rawValue: "Xcode")
    /// Local StoreKit testing: not signed by the App Store either.
    public static let localTesting = Environment(rawValue: "LocalTesting")

    /// Whether tokens from this environment can come from the App Store at
    /// all. Xcode and LocalTesting tokens cannot, so the verifier refuses them
    /// whatever the configuration says.
    public var isAppStoreSigned: Bool {
        self == .production || self == .sandbox
    }

    public var description: String { rawValue }
}

/// The kind of in-app product a transaction is for.
public struct ProductType: RawRepresentable, Hashable, Sendable, Codable, CustomStringConvertible {
    public let rawValue: String

    public init(rawValue: String) {
        self.rawValue = rawValue
    }

    public static let consumable = ProductType(rawValue: "Consumable")
    public static let nonConsumable = ProductType(rawValue: "Non-Consumable")
    public static let autoRenewableSubscription = ProductType(rawValue: "Auto-Renewable Subscription")
    public static let nonRenewingSubscription = ProductType(rawValue: "Non-Renewing Subscription")

    public var description: String { rawValue }
}
