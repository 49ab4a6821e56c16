import COpenSSL

/// A P-256 private key: the App Store Server API's In-App Purchase key
/// (a PKCS#8 `.p8` file), and the tests' own signing keys.
///
/// OpenSSL 3 allows concurrent signing with one key, so instances are
/// shared freely across threads. The key's bytes are never printed: the
/// type has no description of them.
public final class PrivateKey: @unchecked Sendable {
    /// Owned reference; freed in `deinit`.
    package let pkey: OpaquePointer

    /// The matching public key.
    public let publicKey: PublicKey

    public enum KeyError: Error, Equatable, CustomStringConvertible {
        /// Not a PEM private key OpenSSL can read.
        case unreadable
        /// A private key, but not an EC key on P-256.
        case notP256
        /// OpenSSL failed to sign (it should not with a good key).
        case signingFailed

        public var description: String {
            switch self {
            case .unreadable: "not a PEM private key (PKCS#8, as Apple's .p8 files are)"
            case .notP256: "not an elliptic-curve key on P-256, which ES256 needs"
            case .signingFailed: "signing failed"
            }
        }
    }

    /// Generates a fresh key on P-256 (named-curve encoding).
    public init() {
        let generated = generateKey(EVP_PKEY_EC, "P-256") {
            EVP_PKEY_CTX_set_ec_paramgen_curve_nid($0, NID_X9_62_prime256v1)
        }
        self.pkey = generated
        // The public half shares the key object; one more reference for it.
        precondition(EVP_PKEY_up_ref(generated) == 1, "EVP_PKEY_up_ref failed")
        self.publicKey = PublicKey(owning: generated)
    }

    /// Reads a PEM private key (`-----BEGIN PRIVATE KEY-----`, PKCS#8) that
    /// must be on P-256; an encrypted one is `unreadable`. OpenSSL's error
    /// text is dropped: it may quote the input.
    public init(pem: String) throws(KeyError) {
        ERR_clear_error()
        defer { ERR_clear_error() }
        guard let read = readPrivateKeyPEM(pem) else { throw .unreadable }
        guard PublicKey.isP256(read) else {
            EVP_PKEY_free(read)
            throw .notP256
        }
        self.pkey = read
        precondition(EVP_PKEY_up_ref(read) == 1, "EVP_PKEY_up_ref failed")
        self.publicKey = PublicKey(owning: read)
    }

    deinit {
        EVP_PKEY_free(pkey)
    }

    /// The key as unencrypted PKCS#8 PEM, the form of Apple's `.p8` files.
    public var pkcs8PEM: String { Crypto.pkcs8PEM(of: pkey) }

    /// Signs `message` with ES256 and returns the 64-byte r‖s form JOSE uses.
    public func signES256(_ message: some Collection<UInt8>) throws(KeyError) -> [UInt8] {
        let der = try signES256DER(message)
        var cursor: UnsafePointer<UInt8>? = nil
        let signature = der.withUnsafeBufferPointer { buffer -> OpaquePointer? in
            cursor = buffer.baseAddress
            return d2i_ECDSA_SIG(nil, &cursor, buffer.count)
        }
        guard let signature else { throw .signingFailed }
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
        guard ok else { throw .signingFailed }
        return raw
    }

    /// Signs `message` with ECDSA P-256 / SHA-256 and returns the DER
    /// `ECDSA-Sig-Value`. JOSE does not use this form; tests use it to show
    /// that a verifier rejects it.
    public func signES256DER(_ message: some Collection<UInt8>) throws(KeyError) -> [UInt8] {
        ERR_clear_error()
        defer { ERR_clear_error() }
        guard let context = EVP_MD_CTX_new() else { throw .signingFailed }
        defer { EVP_MD_CTX_free(context) }
        guard EVP_DigestSignInit(context, nil, EVP_sha256(), nil, pkey) == 1 else { throw .signingFailed }
        let der: [UInt8]? = withBytePointer(message) { pointer, count in
            var length = 0
            guard EVP_DigestSign(context, nil, &length, pointer, count) == 1 else { return nil }
            var der = [UInt8](repeating: 0, count: length)
            guard EVP_DigestSign(context, &der, &length, pointer, count) == 1 else { return nil }
            return Array(der.prefix(length))
        }
        guard let der else { throw .signingFailed }
        return der
    }
}
