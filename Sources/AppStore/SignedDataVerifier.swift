import Crypto
import Foundation
import JSON

/// Verifies App Store signed data offline: StoreKit 2 transactions, renewal
/// info and App Store Server Notifications V2.
///
/// It follows the offline checks of Apple's App Store Server Library
/// `SignedDataVerifier`, in the same order, and is stricter where that is
/// free:
///
/// 1. Parse: three canonical base64url segments; a JSON header whose `alg` is
///    exactly `ES256` and whose `x5c` holds exactly three DER certificates; a
///    JSON payload with an integer `signedDate` (`malformed`, `bad_algorithm`).
/// 2. Signature: the leaf key is P-256 and the 64-byte r‖s ES256 signature
///    verifies over the ASCII `header.payload`; DER signatures are refused
///    (`bad_signature`). It comes before the chain because it is one P-256
///    check, where the chain is two P-384 ones: a junk token that carries
///    Apple's real certificates costs no chain work.
/// 3. Chain: `signedDate` may be at most 60 s ahead of the clock. The leaf
///    x5c[0] must chain through the intermediate x5c[1] to a configured root,
///    checked by OpenSSL in X509 strict mode at `signedDate`; the path must be
///    exactly leaf → x5c[1] → root, and the leaf must not be a CA
///    (`untrusted_root`, `bad_chain`). x5c[2] is parsed but never used: trust
///    comes only from the configured roots, as in Apple's library. A pair of
///    leaf and intermediate that verified is remembered (see `ChainCache`),
///    so the next token from it only has its dates checked.
/// 4. Marker extensions: 1.2.840.113635.100.6.11.1 on the leaf and
///    1.2.840.113635.100.6.2.1 on the intermediate (`missing_apple_oid`).
/// 5. Claims: bundle ID, environment and, for notifications, the app's Apple
///    ID (`bundle_mismatch`, `environment_not_allowed`). A notification's
///    nested transaction and renewal info are then verified on their own and
///    must agree with the notification's bundle and environment.
///
/// Revocation (OCSP) is not checked; that needs the network.
public struct SignedDataVerifier: Sendable {
    /// How far `signedDate` may run ahead of our clock.
    public static let signedDateFutureToleranceMilliseconds: Int64 = 60_000

    static let leafMarkerOID = "1.2.840.113635.100.6.11.1"
    static let intermediateMarkerOID = "1.2.840.113635.100.6.2.1"

    public let configuration: VerifierConfiguration
    /// Chains that verified; shared by copies of this verifier.
    public let chainCache: ChainCache

    public init(configuration: VerifierConfiguration, chainCacheEntriesMax: Int = ChainCache.pairsMax) {
        self.configuration = configuration
        self.chainCache = ChainCache(entriesMax: chainCacheEntriesMax)
    }

    /// Verifies a signed transaction (JWSTransaction).
    public func verifyTransaction(_ jws: String) throws(VerificationError) -> VerifiedTransaction {
        let signed = try authenticate(jws)
        do {
            return try checkTransaction(signed)
        } catch {
            throw error.appleSigned()
        }
    }

    /// Verifies signed renewal info (JWSRenewalInfo).
    public func verifyRenewalInfo(_ jws: String) throws(VerificationError) -> VerifiedRenewalInfo {
        let signed = try authenticate(jws)
        do {
            return try checkRenewalInfo(signed)
        } catch {
            throw error.appleSigned()
        }
    }

    /// Verifies a notification's `signedPayload`, and the transaction and
    /// renewal info nested in it. A refusal after the token authenticated
    /// says so (`isAppleSigned`): whatever is wrong, Apple signed it.
    public func verifyNotification(_ jws: String) throws(VerificationError) -> VerifiedNotification {
        let signed = try authenticate(jws)
        do {
            return try checkNotification(signed)
        } catch {
            throw error.appleSigned()
        }
    }

    /// Verifies a token of any of the three kinds, telling them apart by the
    /// verified payload: `notificationType` marks a notification,
    /// `transactionId` a transaction, `autoRenewStatus` or
    /// `autoRenewProductId` renewal info.
    public func verifyAny(_ jws: String) throws(VerificationError) -> VerifiedSignedData {
        let signed = try authenticate(jws)
        do {
            return try checkAny(signed)
        } catch {
            throw error.appleSigned()
        }
    }

    private func checkAny(_ signed: AuthenticatedPayload) throws(VerificationError) -> VerifiedSignedData {
        let members = (try? JSONParser.parse(signed.payloadJSON))?.objectMembers ?? []
        let keys = Set(members.map(\.key))
        if keys.contains("notificationType") {
            return .notification(try checkNotification(signed))
        }
        if keys.contains("transactionId") {
            return .transaction(try checkTransaction(signed))
        }
        if keys.contains("autoRenewStatus") || keys.contains("autoRenewProductId") {
            return .renewalInfo(try checkRenewalInfo(signed))
        }
        throw VerificationError(.malformed, "payload is not a transaction, renewal info or notification")
    }

    // MARK: - Stages 1–4: the token is what Apple signed

    /// The payload of a token whose chain, marker extensions and signature verified.
    struct AuthenticatedPayload {
        let payloadJSON: Data
    }

    func authenticate(_ jws: String) throws(VerificationError) -> AuthenticatedPayload {
        let token = try CompactJWS(jws)
        try checkSignature(token)
        try checkChain(token)
        try checkMarkerExtensions(token)
        return AuthenticatedPayload(payloadJSON: Data(token.payloadJSON))
    }

    private func checkChain(_ token: CompactJWS) throws(VerificationError) {
        let now = configuration.clock()
        let key = ChainCache.key(leaf: token.leaf, intermediate: token.intermediate)
        if let window = chainCache.window(for: key, now: now) {
            // The pair is known to chain to a configured root; only the time
            // is the token's own. Outside the window the full check below
            // gives the precise reason.
            let verificationSeconds = (Double(token.signedDateMilliseconds) / 1000).rounded(.down)
            let (latestMilliseconds, overflow) = Self.milliseconds(now).addingReportingOverflow(
                Self.signedDateFutureToleranceMilliseconds
            )
            if (overflow || token.signedDateMilliseconds <= latestMilliseconds),
               verificationSeconds >= window.notBefore.timeIntervalSince1970,
               verificationSeconds <= window.notAfter.timeIntervalSince1970 {
                return
            }
        }
        chainCache.countVerification()
        let root = try verifyChainFully(token)
        chainCache.remember(key, window: ChainCache.Window(path: [token.leaf, token.intermediate, root]), now: now)
    }

    /// The full check at `signedDate`; returns the root the path ends at.
    private func verifyChainFully(_ token: CompactJWS) throws(VerificationError) -> Certificate {
        let nowMilliseconds = Self.milliseconds(configuration.clock())
        let (latestMilliseconds, overflow) = nowMilliseconds.addingReportingOverflow(
            Self.signedDateFutureToleranceMilliseconds
        )
        guard overflow || token.signedDateMilliseconds <= latestMilliseconds else {
            throw VerificationError(
                .bad_chain,
                "signedDate is more than 60 s ahead of our clock; a chain cannot be checked at a time that has not come"
            )
        }
        let verificationTime = Date(timeIntervalSince1970: Double(token.signedDateMilliseconds) / 1000)
        let path: [Certificate]
        do {
            path = try verifyChain(
                leaf: token.leaf, intermediates: [token.intermediate],
                trustedRoots: configuration.rootCertificates, at: verificationTime, strict: true
            )
        } catch {
            throw Self.verificationError(for: error)
        }
        guard path.count == 3, path[1] === token.intermediate else {
            throw VerificationError(.bad_chain, "the verified path is not leaf, x5c[1], root")
        }
        guard !token.leaf.isCA else {
            throw VerificationError(.bad_chain, "x5c[0] is a CA certificate, not a signing leaf")
        }
        return path[2]
    }

    /// Milliseconds since 1970, clamped to what Int64 holds.
    private static func milliseconds(_ date: Date) -> Int64 {
        let value = (date.timeIntervalSince1970 * 1000).rounded(.down)
        guard value.isFinite else { return value > 0 ? .max : .min }
        if value >= Double(Int64.max) { return .max }
        if value <= Double(Int64.min) { return .min }
        return Int64(value)
    }

    private static func verificationError(for error: ChainError) -> VerificationError {
        let position = switch error.depth {
        case 0: "x5c[0] (leaf)"
        case 1: "x5c[1] (intermediate)"
        default: "the root"
        }
        switch error.kind {
        case .untrustedRoot where error.depth == 0:
            return VerificationError(
                .bad_chain, "x5c[0] (leaf) was not issued by x5c[1]", diagnostic: error.debugDescription
            )
        case .untrustedRoot:
            return VerificationError(
                .untrusted_root, "the chain does not lead to a configured root certificate",
                diagnostic: error.debugDescription
            )
        case .invalid(let reason):
            let what = switch reason {
            case .expired: "expired at signedDate"
            case .notYetValid: "not yet valid at signedDate"
            case .badSignature: "has a bad certificate signature"
            case .notCertificateAuthority: "is not a valid CA for its place in the chain"
            case .unhandledCriticalExtension: "has an unknown critical extension"
            case .strictProfileViolation: "breaks the X.509 strict profile"
            case .chainTooLong: "makes the chain too long"
            case .other: "failed verification"
            }
            return VerificationError(.bad_chain, "\(position) \(what)", diagnostic: error.debugDescription)
        }
    }

    private func checkMarkerExtensions(_ token: CompactJWS) throws(VerificationError) {
        guard token.leaf.hasExtension(oid: Self.leafMarkerOID) else {
            throw VerificationError(.missing_apple_oid, "x5c[0] (leaf) lacks extension \(Self.leafMarkerOID)")
        }
        guard token.intermediate.hasExtension(oid: Self.intermediateMarkerOID) else {
            throw VerificationError(
                .missing_apple_oid, "x5c[1] (intermediate) lacks extension \(Self.intermediateMarkerOID)"
            )
        }
    }

    private func checkSignature(_ token: CompactJWS) throws(VerificationError) {
        guard token.leaf.publicKey.isP256 else {
            throw VerificationError(.bad_signature, "x5c[0] (leaf) key is not P-256")
        }
        guard token.signature.count == 64 else {
            throw VerificationError(
                .bad_signature, "signature is \(token.signature.count) bytes, not the 64-byte r‖s of ES256"
            )
        }
        guard token.leaf.publicKey.verifyES256(rawSignature: token.signature, message: token.signingInput) else {
            throw VerificationError(.bad_signature, "ES256 signature does not verify with the leaf key")
        }
    }

    // MARK: - Stage 5: the claims are ours

    private func checkTransaction(_ signed: AuthenticatedPayload) throws(VerificationError) -> VerifiedTransaction {
        let payload = try decode(TransactionPayload.self, from: signed, what: "transaction")
        try checkBundle(payload.bundleId)
        try checkEnvironment(payload.environment)
        return VerifiedTransaction(payload: payload, payloadJSON: signed.payloadJSON)
    }

    private func checkRenewalInfo(_ signed: AuthenticatedPayload) throws(VerificationError) -> VerifiedRenewalInfo {
        let payload = try decode(RenewalInfoPayload.self, from: signed, what: "renewal info")
        try checkEnvironment(payload.environment)
        return VerifiedRenewalInfo(payload: payload, payloadJSON: signed.payloadJSON)
    }

    private func checkNotification(_ signed: AuthenticatedPayload) throws(VerificationError) -> VerifiedNotification {
        let payload = try decode(NotificationPayload.self, from: signed, what: "notification")
        let bundleID: String
        let environment: Environment
        let appAppleID: Int64?
        if let data = payload.data {
            (bundleID, environment, appAppleID) = (data.bundleId, data.environment, data.appAppleId)
        } else if let summary = payload.summary {
            (bundleID, environment, appAppleID) = (summary.bundleId, summary.environment, summary.appAppleId)
        } else {
            throw VerificationError(.malformed, "notification has neither data nor summary")
        }
        try checkBundle(bundleID)
        try checkEnvironment(environment)
        try checkAppAppleID(appAppleID, environment: environment)

        var transaction: VerifiedTransaction?
        if let nested = payload.data?.signedTransactionInfo {
            let verified: VerifiedTransaction
            do {
                verified = try verifyTransaction(nested)
            } catch {
                throw error.within("data.signedTransactionInfo")
            }
            guard verified.payload.bundleId == bundleID else {
                throw VerificationError(.bundle_mismatch, "data.signedTransactionInfo is for another bundle than the notification")
            }
            guard verified.payload.environment == environment else {
                throw VerificationError(
                    .environment_not_allowed, "data.signedTransactionInfo is from another environment than the notification"
                )
            }
            transaction = verified
        }
        var renewalInfo: VerifiedRenewalInfo?
        if let nested = payload.data?.signedRenewalInfo {
            let verified: VerifiedRenewalInfo
            do {
                verified = try verifyRenewalInfo(nested)
            } catch {
                throw error.within("data.signedRenewalInfo")
            }
            guard verified.payload.environment == environment else {
                throw VerificationError(
                    .environment_not_allowed, "data.signedRenewalInfo is from another environment than the notification"
                )
            }
            renewalInfo = verified
        }
        return VerifiedNotification(
            payload: payload, payloadJSON: signed.payloadJSON, transaction: transaction, renewalInfo: renewalInfo
        )
    }

    private func decode<Payload: Decodable>(
        _ type: Payload.Type,
        from signed: AuthenticatedPayload,
        what: String
    ) throws(VerificationError) -> Payload {
        do {
            // Apple documents these payloads as typed records; Foundation's
            // decoder maps them onto the `Decodable` types in Payloads.swift.
            return try JSONDecoder().decode(type, from: signed.payloadJSON)
        } catch let error as DecodingError {
            throw VerificationError(.malformed, "\(what) payload: \(Self.summary(of: error))")
        } catch {
            throw VerificationError(.malformed, "\(what) payload cannot be decoded")
        }
    }

    private static func summary(of error: DecodingError) -> String {
        func path(_ codingPath: [any CodingKey], _ last: (any CodingKey)? = nil) -> String {
            let keys = (codingPath + (last.map { [$0] } ?? [])).map { key in
                key.intValue.map { "[\($0)]" } ?? key.stringValue
            }
            return keys.isEmpty ? "the payload" : keys.joined(separator: ".")
        }
        switch error {
        case .keyNotFound(let key, let context):
            return "required field \(path(context.codingPath, key)) is missing"
        case .valueNotFound(_, let context):
            return "required field \(path(context.codingPath)) is null"
        case .typeMismatch(_, let context):
            return "field \(path(context.codingPath)) has the wrong type"
        case .dataCorrupted(let context):
            return context.codingPath.isEmpty ? "not valid JSON" : "field \(path(context.codingPath)) is invalid"
        @unknown default:
            return "cannot be decoded"
        }
    }

    private func checkBundle(_ bundleID: String) throws(VerificationError) {
        guard configuration.bundleIDs.contains(bundleID) else {
            throw VerificationError(.bundle_mismatch, "bundleId is not one of the configured bundle IDs")
        }
    }

    private func checkEnvironment(_ environment: Environment) throws(VerificationError) {
        guard environment.isAppStoreSigned else {
            throw VerificationError(
                .environment_not_allowed, "environment \(environment.rawValue) is never accepted: the App Store does not sign it"
            )
        }
        guard configuration.environments.contains(environment) else {
            throw VerificationError(.environment_not_allowed, "environment \(environment.rawValue) is not allowed")
        }
    }

    /// Production notifications must name our app; Apple's library reports a
    /// mismatch as an invalid app identifier, which is `bundle_mismatch` here.
    /// Other environments are checked only when both sides have a value.
    private func checkAppAppleID(_ appAppleID: Int64?, environment: Environment) throws(VerificationError) {
        if environment == .production {
            guard let expected = configuration.appAppleID else {
                throw VerificationError(
                    .bundle_mismatch, "no app Apple ID is configured, so Production notifications cannot be matched to the app"
                )
            }
            guard appAppleID == expected else {
                throw VerificationError(.bundle_mismatch, "appAppleId does not match the configured app Apple ID")
            }
        } else if let expected = configuration.appAppleID, let appAppleID, appAppleID != expected {
            throw VerificationError(.bundle_mismatch, "appAppleId does not match the configured app Apple ID")
        }
    }
}
