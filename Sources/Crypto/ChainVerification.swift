public import Foundation
import COpenSSL

/// Why a certificate chain was rejected.
///
/// `description` is generic and safe to show; `debugDescription` adds
/// OpenSSL's verify code and text for logs.
public struct ChainError: Error, Sendable, Equatable, CustomStringConvertible, CustomDebugStringConvertible {
    public enum Kind: Sendable, Equatable {
        /// No path from the leaf reaches one of the trusted roots: an issuer is
        /// missing, or the path ends at a self-signed certificate we do not trust.
        case untrustedRoot
        /// A path was built but a certificate on it fails a check.
        case invalid(InvalidReason)
    }

    public enum InvalidReason: String, Sendable, Equatable {
        case expired
        case notYetValid
        case badSignature
        /// An issuing certificate is not a valid CA (basicConstraints, key usage, path length).
        case notCertificateAuthority
        /// A critical extension OpenSSL does not understand.
        case unhandledCriticalExtension
        /// A rule of `X509_V_FLAG_X509_STRICT` (RFC 5280 profile) fails.
        case strictProfileViolation
        /// The path is longer than OpenSSL's depth limit.
        case chainTooLong
        /// Anything else OpenSSL reports.
        case other
    }

    public let kind: Kind
    /// Position on the path where verification stopped: 0 is the leaf.
    public let depth: Int
    /// OpenSSL's `X509_V_ERR_*` code.
    public let verifyErrorCode: Int32
    let openSSLMessage: String

    public var description: String {
        switch kind {
        case .untrustedRoot:
            "certificate chain does not reach a trusted root (at depth \(depth))"
        case .invalid(let reason):
            "certificate chain is invalid: \(reason.rawValue) (at depth \(depth))"
        }
    }

    public var debugDescription: String {
        "\(description); OpenSSL verify error \(verifyErrorCode): \(openSSLMessage)"
    }

    public static func == (lhs: ChainError, rhs: ChainError) -> Bool {
        lhs.kind == rhs.kind && lhs.depth == rhs.depth && lhs.verifyErrorCode == rhs.verifyErrorCode
    }
}

/// Verifies that `leaf` chains to one of `trustedRoots` at time `at`.
///
/// - Only `trustedRoots` are trust anchors; the system trust store is never
///   consulted. Partial chains are not accepted: the path must end at a root.
/// - `intermediates` are untrusted candidates for the path; OpenSSL picks the
///   ones that link. Check the returned path if its shape matters.
/// - `strict` turns on `X509_V_FLAG_X509_STRICT` (the RFC 5280 profile checks:
///   critical basicConstraints on CAs, key identifiers, key usage on CAs, …).
/// - Purpose is "any": no extended key usage is required.
///
/// - Returns: the verified path, leaf first and trusted root last, as the
///   same `Certificate` objects that were passed in.
@discardableResult
public func verifyChain(
    leaf: Certificate,
    intermediates: [Certificate],
    trustedRoots: [Certificate],
    at time: Date,
    strict: Bool = true
) throws(ChainError) -> [Certificate] {
    // Bounded input: a path longer than this is never legitimate here.
    precondition(intermediates.count <= 8, "too many intermediate certificates")
    precondition(time.timeIntervalSince1970.isFinite, "verification time must be finite")
    ERR_clear_error()
    defer { ERR_clear_error() }

    guard let store = X509_STORE_new() else { throw internalChainError("X509_STORE_new failed") }
    defer { X509_STORE_free(store) }
    for root in trustedRoots {
        guard X509_STORE_add_cert(store, root.x509) == 1 else {
            throw internalChainError("X509_STORE_add_cert failed")
        }
    }

    guard let untrusted = COpenSSL_sk_X509_new_null() else { throw internalChainError("sk_X509_new_null failed") }
    defer { COpenSSL_sk_X509_free(untrusted) }
    for certificate in intermediates {
        // The stack borrows the pointer; `intermediates` keeps it alive.
        guard COpenSSL_sk_X509_push(untrusted, certificate.x509) > 0 else {
            throw internalChainError("sk_X509_push failed")
        }
    }

    guard let context = X509_STORE_CTX_new() else { throw internalChainError("X509_STORE_CTX_new failed") }
    defer { X509_STORE_CTX_free(context) }
    guard X509_STORE_CTX_init(context, store, leaf.x509, untrusted) == 1 else {
        throw internalChainError("X509_STORE_CTX_init failed")
    }
    guard let parameters = X509_STORE_CTX_get0_param(context) else {
        throw internalChainError("X509_STORE_CTX_get0_param failed")
    }
    if strict {
        X509_VERIFY_PARAM_set_flags(parameters, UInt(X509_V_FLAG_X509_STRICT))
    }
    X509_VERIFY_PARAM_set_time(parameters, time_t(time.timeIntervalSince1970.rounded(.down)))
    guard X509_VERIFY_PARAM_set_purpose(parameters, X509_PURPOSE_ANY) == 1 else {
        throw internalChainError("X509_VERIFY_PARAM_set_purpose failed")
    }

    let verified = X509_verify_cert(context)
    guard verified == 1 else {
        let code = X509_STORE_CTX_get_error(context)
        let depth = Int(X509_STORE_CTX_get_error_depth(context))
        var message = String(cString: X509_verify_cert_error_string(Int(code)))
        if verified < 0 { message += "; \(drainOpenSSLErrors())" }
        throw ChainError(kind: classify(code), depth: depth, verifyErrorCode: code, openSSLMessage: message)
    }

    // Map the path OpenSSL built back onto the caller's objects.
    guard let chain = X509_STORE_CTX_get0_chain(context) else {
        throw internalChainError("X509_STORE_CTX_get0_chain returned nothing")
    }
    let candidates = [leaf] + intermediates + trustedRoots
    var path: [Certificate] = []
    for index in 0..<COpenSSL_sk_X509_num(chain) {
        let element = COpenSSL_sk_X509_value(chain, index)
        guard let match = candidates.first(where: { $0.x509 == element }) else {
            throw internalChainError("verified path holds a certificate that was not supplied")
        }
        path.append(match)
    }
    return path
}

private func internalChainError(_ what: String) -> ChainError {
    ChainError(
        kind: .invalid(.other), depth: 0, verifyErrorCode: X509_V_ERR_UNSPECIFIED,
        openSSLMessage: "\(what): \(drainOpenSSLErrors())"
    )
}

private func classify(_ code: Int32) -> ChainError.Kind {
    switch code {
    case X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT,
         X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT_LOCALLY,
         X509_V_ERR_UNABLE_TO_VERIFY_LEAF_SIGNATURE,
         X509_V_ERR_DEPTH_ZERO_SELF_SIGNED_CERT,
         X509_V_ERR_SELF_SIGNED_CERT_IN_CHAIN,
         X509_V_ERR_CERT_UNTRUSTED,
         X509_V_ERR_CERT_REJECTED:
        .untrustedRoot
    case X509_V_ERR_CERT_HAS_EXPIRED:
        .invalid(.expired)
    case X509_V_ERR_CERT_NOT_YET_VALID:
        .invalid(.notYetValid)
    case X509_V_ERR_CERT_SIGNATURE_FAILURE,
         X509_V_ERR_UNABLE_TO_DECRYPT_CERT_SIGNATURE,
         X509_V_ERR_UNABLE_TO_DECODE_ISSUER_PUBLIC_KEY,
         X509_V_ERR_NO_ISSUER_PUBLIC_KEY:
        .invalid(.badSignature)
    case X509_V_ERR_INVALID_CA,
         X509_V_ERR_PATH_LENGTH_EXCEEDED,
         X509_V_ERR_KEYUSAGE_NO_CERTSIGN,
         X509_V_ERR_INVALID_NON_CA:
        .invalid(.notCertificateAuthority)
    case X509_V_ERR_UNHANDLED_CRITICAL_EXTENSION:
        .invalid(.unhandledCriticalExtension)
    case X509_V_ERR_CERT_CHAIN_TOO_LONG:
        .invalid(.chainTooLong)
    case X509_V_ERR_INVALID_EXTENSION,
         X509_V_ERR_PATHLEN_INVALID_FOR_NON_CA,
         X509_V_ERR_PATHLEN_WITHOUT_KU_KEY_CERT_SIGN,
         X509_V_ERR_KU_KEY_CERT_SIGN_INVALID_FOR_NON_CA,
         X509_V_ERR_ISSUER_NAME_EMPTY,
         X509_V_ERR_SUBJECT_NAME_EMPTY,
         X509_V_ERR_MISSING_AUTHORITY_KEY_IDENTIFIER,
         X509_V_ERR_MISSING_SUBJECT_KEY_IDENTIFIER,
         X509_V_ERR_EMPTY_SUBJECT_ALT_NAME,
         X509_V_ERR_EMPTY_SUBJECT_SAN_NOT_CRITICAL,
         X509_V_ERR_CA_BCONS_NOT_CRITICAL,
         X509_V_ERR_AUTHORITY_KEY_IDENTIFIER_CRITICAL,
         X509_V_ERR_SUBJECT_KEY_IDENTIFIER_CRITICAL,
         X509_V_ERR_CA_CERT_MISSING_KEY_USAGE,
         X509_V_ERR_EXTENSIONS_REQUIRE_VERSION_3,
         X509_V_ERR_EC_KEY_EXPLICIT_PARAMS,
         X509_V_ERR_SIGNATURE_ALGORITHM_INCONSISTENCY:
        .invalid(.strictProfileViolation)
    default:
        .invalid(.other)
    }
}
