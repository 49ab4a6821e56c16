public import Crypto
public import Foundation
import JSON

/// The bearer token of an App Store Server API request: a JWT signed ES256
/// with the In-App Purchase key, made fresh for every request.
///
/// - header: `alg` ES256, `kid` the key id, `typ` JWT;
/// - claims: `iss` the issuer id, `iat` now, `exp` five minutes later (Apple
///   accepts up to sixty), `aud` `appstoreconnect-v1`, `bid` the bundle id.
public enum ServerAPIToken {
    public struct Claims: Sendable, Equatable {
        public var keyID: String
        public var issuerID: String
        public var bundleID: String

        public init(keyID: String, issuerID: String, bundleID: String) {
            self.keyID = keyID
            self.issuerID = issuerID
            self.bundleID = bundleID
        }
    }

    public static let audience = "appstoreconnect-v1"
    public static let lifetimeSeconds: Int64 = 300

    public static func make(_ claims: Claims, key: PrivateKey, now: Date) throws(PrivateKey.KeyError) -> String {
        let issuedAt = Int64(now.timeIntervalSince1970.rounded(.down))
        // Members in key order, as this token has always been written.
        let header: JSONValue = ["alg": "ES256", "kid": .string(claims.keyID), "typ": "JWT"]
        let payload: JSONValue = [
            "aud": .string(audience), "bid": .string(claims.bundleID), "exp": JSONValue(issuedAt + lifetimeSeconds),
            "iat": JSONValue(issuedAt), "iss": .string(claims.issuerID),
        ]
        let signingInput = Base64URL.encode(header.serialized()) + "." + Base64URL.encode(payload.serialized())
        let signature = try key.signES256(Array(signingInput.utf8))
        return signingInput + "." + Base64URL.encode(signature)
    }
}
