public import Crypto
import COpenSSL

/// A P-256 private key, for tests that sign their own tokens and
/// certificates. The service never signs with ECDSA, so this lives beside
/// the tests rather than in `Crypto`.
public final class PrivateKey: @unchecked Sendable {
    /// Owned reference; freed in `deinit`.
    let pkey: OpaquePointer

    /// The matching public key.
    public let publicKey: PublicKey

    /// Generates a fresh key on P-256 (named-curve encoding).
    public init() {
        var generated: OpaquePointer?
        let context = EVP_PKEY_CTX_new_id(EVP_PKEY_EC, nil)
        defer { EVP_PKEY_CTX_free(context) }
        guard let context,
              EVP_PKEY_keygen_init(context) == 1,
              EVP_PKEY_CTX_set_ec_paramgen_curve_nid(context, NID_X9_62_prime256v1) == 1,
              EVP_PKEY_keygen(context, &generated) == 1,
              let generated
        else {
            fatalError("P-256 key generation failed: \(drainOpenSSLErrors())")
        }
        self.pkey = generated
        // The public half shares the key object; one more reference for it.
        precondition(EVP_PKEY_up_ref(generated) == 1, "EVP_PKEY_up_ref failed")
        self.publicKey = PublicKey(owning: generated)
    }

    deinit {
        EVP_PKEY_free(pkey)
    }

    /// Signs `message` with ES256 and returns the 64-byte r‖s form JOSE uses.
    public func signES256(_ message: some Collection<UInt8>) -> [UInt8] {
        let der = signES256DER(message)
        var cursor: UnsafePointer<UInt8>? = nil
        let signature = der.withUnsafeBufferPointer { buffer -> OpaquePointer? in
            cursor = buffer.baseAddress
            return d2i_ECDSA_SIG(nil, &cursor, buffer.count)
        }
        guard let signature else { fatalError("d2i_ECDSA_SIG failed on our own signature") }
        defer { ECDSA_SIG_free(signature) }
        var r: OpaquePointer?
        var s: OpaquePointer?
        ECDSA_SIG_get0(signature, &r, &s)
        let half = PublicKey.p256ScalarByteCount
        var raw = [UInt8](repeating: 0, count: 2 * half)
        let ok = raw.withUnsafeMutableBufferPointer { buffer in
            BN_bn2binpad(r, buffer.baseAddress, Int32(half)) == Int32(half)
                && BN_bn2binpad(s, buffer.baseAddress! + half, Int32(half)) == Int32(half)
        }
        precondition(ok, "ECDSA scalar does not fit 32 bytes")
        return raw
    }

    /// Signs `message` with ECDSA P-256 / SHA-256 and returns the DER
    /// `ECDSA-Sig-Value`. JOSE does not use this form; tests use it to show
    /// that a verifier rejects it.
    public func signES256DER(_ message: some Collection<UInt8>) -> [UInt8] {
        guard let context = EVP_MD_CTX_new() else { fatalError("EVP_MD_CTX_new failed") }
        defer { EVP_MD_CTX_free(context) }
        guard EVP_DigestSignInit(context, nil, EVP_sha256(), nil, pkey) == 1 else {
            fatalError("EVP_DigestSignInit failed: \(drainOpenSSLErrors())")
        }
        return withBytePointer(message) { pointer, count in
            var length = 0
            guard EVP_DigestSign(context, nil, &length, pointer, count) == 1 else {
                fatalError("EVP_DigestSign (size) failed: \(drainOpenSSLErrors())")
            }
            var der = [UInt8](repeating: 0, count: length)
            guard EVP_DigestSign(context, &der, &length, pointer, count) == 1 else {
                fatalError("EVP_DigestSign failed: \(drainOpenSSLErrors())")
            }
            return Array(der.prefix(length))
        }
    }
}
