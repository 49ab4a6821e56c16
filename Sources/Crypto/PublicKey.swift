import COpenSSL

/// A public key (an `EVP_PKEY`), immutable once made.
///
/// OpenSSL 3 allows concurrent verification with one key, so instances are
/// shared freely across threads.
public final class PublicKey: @unchecked Sendable {
    /// Owned reference; freed in `deinit`.
    package let pkey: OpaquePointer

    /// Whether this is an EC key on the NIST P-256 curve (prime256v1).
    public let isP256: Bool

    /// Whether this is a plain RSA key (`rsaEncryption`). RSA-PSS-only keys
    /// are not: they cannot make or check PKCS#1 v1.5 signatures.
    public let isRSA: Bool

    /// The modulus size in bits for an RSA key, nil for any other kind.
    public let rsaBits: Int?

    /// Takes ownership of one reference to `pkey`.
    package init(owning pkey: OpaquePointer) {
        self.pkey = pkey
        self.isP256 = Self.isP256(pkey)
        self.isRSA = Self.isRSA(pkey)
        self.rsaBits = isRSA ? Int(EVP_PKEY_get_bits(pkey)) : nil
    }

    deinit {
        EVP_PKEY_free(pkey)
    }

    /// The DER SubjectPublicKeyInfo, as found inside a certificate.
    public var subjectPublicKeyInfoDER: [UInt8] {
        let length = i2d_PUBKEY(pkey, nil)
        precondition(length > 0, "i2d_PUBKEY failed")
        var bytes = [UInt8](repeating: 0, count: Int(length))
        let written = bytes.withUnsafeMutableBufferPointer { buffer -> Int32 in
            var cursor = buffer.baseAddress
            return i2d_PUBKEY(pkey, &cursor)
        }
        precondition(written == length, "i2d_PUBKEY wrote an unexpected length")
        return bytes
    }

    /// Verifies an ES256 signature (RFC 7518 §3.4): ECDSA over P-256 with SHA-256,
    /// given as the 64-byte concatenation of R and S, each 32 bytes big-endian.
    ///
    /// Returns false for a key that is not P-256 and for any signature that is
    /// not exactly 64 bytes, so a DER-encoded ECDSA signature is rejected.
    public func verifyES256(rawSignature: [UInt8], message: some Collection<UInt8>) -> Bool {
        guard isP256, rawSignature.count == 2 * Self.p256ScalarByteCount else { return false }
        guard let der = Self.derSignature(fromRaw: rawSignature) else { return false }
        ERR_clear_error()
        defer { ERR_clear_error() }
        guard let context = EVP_MD_CTX_new() else { return false }
        defer { EVP_MD_CTX_free(context) }
        guard EVP_DigestVerifyInit(context, nil, EVP_sha256(), nil, pkey) == 1 else { return false }
        let result = der.withUnsafeBufferPointer { signature in
            withBytePointer(message) { pointer, count in
                EVP_DigestVerify(context, signature.baseAddress, signature.count, pointer, count)
            }
        }
        return result == 1
    }

    package static let p256ScalarByteCount = 32

    /// Re-encodes r‖s as the DER `ECDSA-Sig-Value` that OpenSSL verifies.
    static func derSignature(fromRaw raw: [UInt8]) -> [UInt8]? {
        let half = p256ScalarByteCount
        guard let signature = ECDSA_SIG_new() else { return nil }
        defer { ECDSA_SIG_free(signature) }
        let r = raw.withUnsafeBufferPointer { BN_bin2bn($0.baseAddress, Int32(half), nil) }
        let s = raw.withUnsafeBufferPointer { BN_bin2bn($0.baseAddress! + half, Int32(half), nil) }
        guard let r, let s else {
            BN_free(r)
            BN_free(s)
            return nil
        }
        // ECDSA_SIG_set0 takes ownership of both numbers on success.
        guard ECDSA_SIG_set0(signature, r, s) == 1 else {
            BN_free(r)
            BN_free(s)
            return nil
        }
        let length = i2d_ECDSA_SIG(signature, nil)
        guard length > 0 else { return nil }
        var der = [UInt8](repeating: 0, count: Int(length))
        let written = der.withUnsafeMutableBufferPointer { buffer -> Int32 in
            var cursor = buffer.baseAddress
            return i2d_ECDSA_SIG(signature, &cursor)
        }
        return written == length ? der : nil
    }

    static func isP256(_ pkey: OpaquePointer) -> Bool {
        guard EVP_PKEY_get_base_id(pkey) == EVP_PKEY_EC else { return false }
        var name = [CChar](repeating: 0, count: 64)
        var length = 0
        guard EVP_PKEY_get_group_name(pkey, &name, name.count, &length) == 1 else { return false }
        return cString(name) == "prime256v1"
    }
}
