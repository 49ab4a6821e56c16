public import WalletCore

/// Why a signed App Store payload was refused. The raw values are stable
/// and safe to return to clients and to count in metrics.
public enum VerificationFailure: String, Sendable, Equatable, CaseIterable {
    /// Not a compact JWS of the expected shape: segments, base64url, JSON,
    /// header fields, x5c with exactly three certificates, or a payload
    /// without an integer `signedDate`.
    case malformed
    /// The header's `alg` is not exactly `ES256`.
    case bad_algorithm
    /// The x5c chain is broken or a certificate on it is invalid at
    /// `signedDate` (expired, not yet valid, bad signature, strict-mode
    /// violation), or `signedDate` lies in the future.
    case bad_chain
    /// The chain does not lead to one of the configured roots.
    case untrusted_root
    /// The leaf or intermediate lacks Apple's marker extension.
    case missing_apple_oid
    /// The ES256 signature does not verify with the leaf's P-256 key.
    case bad_signature
    /// The payload is for a bundle (or, for notifications, an app Apple ID)
    /// other than the configured ones.
    case bundle_mismatch
    /// The payload's environment is not allowed.
    case environment_not_allowed

    /// The same code as a credit's or a kept refusal's reason.
    public var refusalReason: RefusalReason {
        switch self {
        case .malformed: .malformed
        case .bad_algorithm: .badAlgorithm
        case .bad_chain: .badChain
        case .untrusted_root: .untrustedRoot
        case .missing_apple_oid: .missingAppleOID
        case .bad_signature: .badSignature
        case .bundle_mismatch: .bundleMismatch
        case .environment_not_allowed: .environmentNotAllowed
        }
    }
}

/// A refused payload: a stable reason and a human sentence.
///
/// `description` is safe to show; it never holds token contents beyond the
/// identifiers being compared. `debugDescription` adds library detail (such
/// as OpenSSL's verify error) for logs.
public struct VerificationError: Error, Sendable, Equatable, CustomStringConvertible, CustomDebugStringConvertible {
    public let reason: VerificationFailure
    public let detail: String
    let diagnostic: String?
    /// The token's signature, certificate chain and Apple's marker
    /// extensions held, and a later check refused what it says (another
    /// bundle, environment or app): the refused data is Apple's, not junk
    /// or a forgery.
    public private(set) var isAppleSigned = false

    init(_ reason: VerificationFailure, _ detail: String, diagnostic: String? = nil) {
        self.reason = reason
        self.detail = detail
        self.diagnostic = diagnostic
    }

    /// The same failure, of a token whose signature and chain held.
    func appleSigned() -> VerificationError {
        var error = self
        error.isAppleSigned = true
        return error
    }

    public var description: String {
        "\(reason.rawValue): \(detail)"
    }

    public var debugDescription: String {
        guard let diagnostic else { return description }
        return "\(description) [\(diagnostic)]"
    }

    /// The same failure, with `detail` prefixed by where it happened.
    func within(_ location: String) -> VerificationError {
        var error = VerificationError(reason, "\(location): \(detail)", diagnostic: diagnostic)
        error.isAppleSigned = isAppleSigned
        return error
    }
}
