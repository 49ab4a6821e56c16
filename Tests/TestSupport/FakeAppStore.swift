public import AppStore
public import Crypto
public import CryptoTestSupport
public import Foundation

/// An in-process stand-in for Apple's signing PKI: a root, an intermediate
/// with Apple's WWDR marker, and a leaf with the receipt-signing marker, all
/// strict-mode clean. It signs compact JWS tokens the way the App Store does.
public struct FakeAppStore {
    public static let leafMarkerOID = "1.2.840.113635.100.6.11.1"
    public static let intermediateMarkerOID = "1.2.840.113635.100.6.2.1"
    public static let bundleID = "com.example.coins"
    public static let appAppleID: Int64 = 1_234_567_890

    /// Certificates are valid for a year from here.
    public static let start = Date(timeIntervalSince1970: 1_700_000_000)  // 2023-11-14
    public static let end = start.addingTimeInterval(365 * 86_400)
    /// The `signedDate` of tokens, and the default clock is 5 s later.
    public static let signedDate = start.addingTimeInterval(30 * 86_400)
    public static var signedDateMilliseconds: Int64 { milliseconds(signedDate) }

    public let root: CertificateAuthority
    public let intermediate: CertificateAuthority
    public let leafKey: PrivateKey
    public let leaf: Certificate

    public struct Options {
        public var leafMarker = true
        public var intermediateMarker = true
        /// nil: the end of `validity`.
        public var leafNotAfter: Date?
        public var leafIsCA = false
        public var keyIdentifiers = true
        /// When every certificate's validity starts and ends; tests that
        /// sign with today's dates move it around now.
        public var validity = FakeAppStore.start...FakeAppStore.end

        public init() {}
    }

    public init(_ options: Options = Options()) throws {
        func profile(_ name: String, serial: UInt64) -> CertificateProfile {
            var profile = Self.profile(name, serial: serial, keyIdentifiers: options.keyIdentifiers)
            profile.notBefore = options.validity.lowerBound
            profile.notAfter = options.validity.upperBound
            return profile
        }
        root = try CertificateAuthority.root(profile("Fake Root CA", serial: 1))
        var intermediateProfile = profile("Fake WWDR CA", serial: 2)
        if options.intermediateMarker {
            intermediateProfile.extraExtensions = [.marker(oid: Self.intermediateMarkerOID)]
        }
        intermediate = try root.intermediate(intermediateProfile)
        leafKey = PrivateKey()
        var leafProfile = profile("Fake Receipt Signing", serial: 3)
        leafProfile.notAfter = options.leafNotAfter ?? options.validity.upperBound
        if options.leafMarker {
            leafProfile.extraExtensions = [.marker(oid: Self.leafMarkerOID)]
        }
        if options.leafIsCA {
            leaf = try intermediate.intermediate(leafProfile, key: leafKey).certificate
        } else {
            leaf = try intermediate.leaf(leafProfile, subjectKey: leafKey.publicKey)
        }
    }

    public static func profile(_ name: String, serial: UInt64, keyIdentifiers: Bool = true) -> CertificateProfile {
        CertificateProfile(
            commonName: name, organization: "Example Fruit Inc.", serialNumber: serial,
            notBefore: start, notAfter: end, includesKeyIdentifiers: keyIdentifiers
        )
    }

    public static func milliseconds(_ date: Date) -> Int64 {
        Int64((date.timeIntervalSince1970 * 1000).rounded())
    }

    /// A configuration that trusts this fake root, with the clock 5 s after `signedDate`.
    public func configuration(
        bundleIDs: Set<String> = [FakeAppStore.bundleID],
        environments: Set<Environment> = [.sandbox, .production],
        appAppleID: Int64? = FakeAppStore.appAppleID,
        now: Date = FakeAppStore.signedDate.addingTimeInterval(5)
    ) -> VerifierConfiguration {
        VerifierConfiguration(
            rootCertificates: [root.certificate], bundleIDs: bundleIDs, environments: environments,
            appAppleID: appAppleID, clock: { now }
        )
    }

    public func verifier(
        bundleIDs: Set<String> = [FakeAppStore.bundleID],
        environments: Set<Environment> = [.sandbox, .production],
        appAppleID: Int64? = FakeAppStore.appAppleID,
        now: Date = FakeAppStore.signedDate.addingTimeInterval(5)
    ) -> SignedDataVerifier {
        SignedDataVerifier(configuration: configuration(
            bundleIDs: bundleIDs, environments: environments, appAppleID: appAppleID, now: now
        ))
    }

    public var defaultChain: [Certificate] { [leaf, intermediate.certificate, root.certificate] }

    /// Signs `payload` as a compact JWS. Every part can be overridden to
    /// make a bad token.
    public func sign(
        _ payload: [String: Any],
        alg: String = "ES256",
        chain: [Certificate]? = nil,
        extraHeader: [String: Any] = [:],
        signer: ((String) -> [UInt8])? = nil
    ) -> String {
        var header: [String: Any] = ["alg": alg, "x5c": (chain ?? defaultChain).map { Base64.encode($0.derBytes) }]
        header.merge(extraHeader) { _, new in new }
        return sign(headerJSON: Self.json(header), payloadJSON: Self.json(payload), signer: signer)
    }

    public func sign(headerJSON: [UInt8], payloadJSON: [UInt8], signer: ((String) -> [UInt8])? = nil) -> String {
        let signingInput = Base64URL.encode(headerJSON) + "." + Base64URL.encode(payloadJSON)
        let signature = signer?(signingInput) ?? leafKey.sign(Array(signingInput.utf8))
        return signingInput + "." + Base64URL.encode(signature)
    }

    public static func json(_ object: Any) -> [UInt8] {
        // Sorted keys keep tokens stable across runs apart from the signature.
        Array(try! JSONSerialization.data(withJSONObject: object, options: [.sortedKeys, .withoutEscapingSlashes]))
    }

    // MARK: - Payloads

    public static func transaction(
        transactionID: String = "2000000000000001",
        bundleID: String = FakeAppStore.bundleID,
        environment: String = "Sandbox",
        signedDate: Int64 = FakeAppStore.signedDateMilliseconds
    ) -> [String: Any] {
        [
            "transactionId": transactionID,
            "originalTransactionId": transactionID,
            "bundleId": bundleID,
            "productId": "coins.1000",
            "purchaseDate": signedDate - 60_000,
            "originalPurchaseDate": signedDate - 60_000,
            "quantity": 1,
            "type": "Consumable",
            "inAppOwnershipType": "PURCHASED",
            "signedDate": signedDate,
            "environment": environment,
            "transactionReason": "PURCHASE",
            "storefront": "USA",
            "storefrontId": "143441",
            "price": 4990,
            "currency": "USD",
            "appAccountToken": "7e3fb20b-4cdb-47cc-936d-99d65f608138",
        ]
    }

    public static func renewalInfo(environment: String = "Sandbox") -> [String: Any] {
        [
            "originalTransactionId": "2000000000000001",
            "autoRenewProductId": "pass.monthly",
            "productId": "pass.monthly",
            "autoRenewStatus": 1,
            "signedDate": signedDateMilliseconds,
            "environment": environment,
            "recentSubscriptionStartDate": signedDateMilliseconds - 86_400_000,
            "renewalDate": signedDateMilliseconds + 86_400_000,
        ]
    }

    /// A notification whose `data` carries the given nested tokens.
    public static func notification(
        type: String = "ONE_TIME_CHARGE",
        bundleID: String = FakeAppStore.bundleID,
        environment: String = "Sandbox",
        appAppleID: Int64? = FakeAppStore.appAppleID,
        signedTransactionInfo: String? = nil,
        signedRenewalInfo: String? = nil
    ) -> [String: Any] {
        var data: [String: Any] = ["bundleId": bundleID, "bundleVersion": "42", "environment": environment]
        if let appAppleID { data["appAppleId"] = appAppleID }
        if let signedTransactionInfo { data["signedTransactionInfo"] = signedTransactionInfo }
        if let signedRenewalInfo { data["signedRenewalInfo"] = signedRenewalInfo }
        return [
            "notificationType": type,
            "notificationUUID": "3a4d0a3c-0e0f-4b7e-9a55-6c1f2b8f0c11",
            "version": "2.0",
            "signedDate": signedDateMilliseconds,
            "data": data,
        ]
    }
}

