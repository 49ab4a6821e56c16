import Crypto
import Foundation
import StoreHTTP
import Testing
import WalletCore
@testable import AppStore
@testable import ServiceAPI
@testable import ServiceSupport
@testable import WalletService

/// The pieces of the App Store Server API work that need no network.
@Suite struct ServerAPIUnitTests {
    @Test func notFoundLookupsAreCachedAndLimitedPerUserForAMinute() {
        let lookups = TransactionLookups()
        let start = ContinuousClock.now
        #expect(lookups.admit(flowNo: "1", userID: "u", now: start) == .ask)
        lookups.recordNotFound(flowNo: "1", userID: "u", now: start)
        #expect(lookups.admit(flowNo: "1", userID: "other", now: start + .seconds(59)) == .knownNotFound)
        #expect(lookups.admit(flowNo: "1", userID: "u", now: start + .seconds(61)) == .ask)
        // The miss at 0 s has left the window; ten more fill it.
        for number in 2...11 {
            lookups.recordNotFound(flowNo: String(number), userID: "u", now: start + .seconds(number))
        }
        // The oldest (2 s) leaves at 62 s: 32 s from 30 s.
        #expect(lookups.admit(flowNo: "12", userID: "u", now: start + .seconds(30)) == .limited(retryAfterSeconds: 32))
        #expect(lookups.admit(flowNo: "12", userID: "v", now: start + .seconds(30)) == .ask)
        #expect(lookups.admit(flowNo: "12", userID: "u", now: start + .seconds(62)) == .ask)
    }

    @Test func tokensCarryTheDocumentedHeaderAndClaimsAndVerify() throws {
        let key = PrivateKey()
        let now = Date(timeIntervalSince1970: 1_800_000_000)
        let token = try ServerAPIToken.make(.init(keyID: "KEY1", issuerID: "issuer-1", bundleID: "com.example.coins"),
                                            key: key, now: now)
        let parts = token.split(separator: ".").map(String.init)
        #expect(parts.count == 3)
        let header = try #require(try JSONSerialization.jsonObject(with: Data(Base64URL.decode(parts[0]) ?? [])) as? [String: Any])
        let claims = try #require(try JSONSerialization.jsonObject(with: Data(Base64URL.decode(parts[1]) ?? [])) as? [String: Any])
        #expect(header["alg"] as? String == "ES256")
        #expect(header["kid"] as? String == "KEY1")
        #expect(header["typ"] as? String == "JWT")
        #expect(claims["iss"] as? String == "issuer-1")
        #expect(claims["aud"] as? String == "appstoreconnect-v1")
        #expect(claims["bid"] as? String == "com.example.coins")
        #expect((claims["iat"] as? NSNumber)?.int64Value == 1_800_000_000)
        let expires = (claims["exp"] as? NSNumber)?.int64Value ?? 0
        #expect(expires > 1_800_000_000 && expires <= 1_800_000_000 + 3_600)
        // The bytes too: members in key order.
        #expect(String(decoding: Base64URL.decode(parts[0]) ?? [], as: UTF8.self) == #"{"alg":"ES256","kid":"KEY1","typ":"JWT"}"#)
        #expect(String(decoding: Base64URL.decode(parts[1]) ?? [], as: UTF8.self)
            == #"{"aud":"appstoreconnect-v1","bid":"com.example.coins","exp":1800000300,"iat":1800000000,"iss":"issuer-1"}"#)
        let signature = try #require(Base64URL.decode(parts[2]))
        #expect(key.publicKey.verifyES256(rawSignature: signature, message: Array("\(parts[0]).\(parts[1])".utf8)))
        #expect(!PrivateKey().publicKey.verifyES256(rawSignature: signature, message: Array("\(parts[0]).\(parts[1])".utf8)))
    }

    @Test func aKeyFileIsReadBackAndOtherTextIsRefused() throws {
        let key = PrivateKey()
        let again = try PrivateKey(pem: key.pkcs8PEM)
        #expect(again.publicKey.subjectPublicKeyInfoDER == key.publicKey.subjectPublicKeyInfoDER)
        #expect(key.pkcs8PEM.hasPrefix("-----BEGIN PRIVATE KEY-----"))
        #expect(throws: PrivateKey.KeyError.unreadable) { try PrivateKey(pem: "not a key") }
        #expect(throws: PrivateKey.KeyError.unreadable) { try PrivateKey(pem: "") }
    }

    @Test func retryAfterIsReadAsSecondsOrAsADate() {
        #expect(RetryingCall.retryAfterSeconds("3") == 3)
        #expect(RetryingCall.retryAfterSeconds(" 0 ") == 0)
        #expect(RetryingCall.retryAfterSeconds("86400") == 60)
        #expect(RetryingCall.retryAfterSeconds("-1") == nil)
        #expect(RetryingCall.retryAfterSeconds("soon") == nil)
        #expect(RetryingCall.retryAfterSeconds(nil) == nil)
        #expect(RetryingCall.retryAfterSeconds("Wed, 21 Oct 2015 07:28:00 GMT") == 0)
    }

    @Test func theModeNeedsEveryCredentialNamed() throws {
        let base = ["WALLET_DATABASE_URL": "postgresql:///x", "WALLET_CREDIT_VERIFICATION": "appstore-api",
                    "WALLET_APPLE_BUNDLE_ID": "com.example.coins", "WALLET_APPLE_APP_APPLE_ID": "1"]
        let missing = [("WALLET_APPLE_API_KEY_ID", "K"), ("WALLET_APPLE_API_ISSUER_ID", "I"),
                       ("WALLET_APPLE_API_PRIVATE_KEY_FILE", "/k.p8")]
        for (index, (name, _)) in missing.enumerated() {
            var environment = base
            for (other, value) in missing where other != name { environment[other] = value }
            let configuration = try Configuration.load(environment: environment)
            #expect(throws: Configuration.ConfigurationError.self) { try configuration.validateForServing() }
            do {
                try configuration.validateForServing()
            } catch {
                #expect(error.variable == name, "case \(index)")
            }
        }
        var complete = base
        for (name, value) in missing { complete[name] = value }
        #expect(try Configuration.load(environment: complete).creditVerification == [.appStoreAPI])
        #expect(throws: Configuration.ConfigurationError.self) {
            try Configuration.load(environment: complete.merging(["WALLET_APPLE_REFUND_PREFERENCE": "maybe"]) { $1 })
        }
    }
}
