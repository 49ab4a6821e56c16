import COpenSSL

/// An RSA private key that signs RS256: a Google service account's key (the
/// PKCS#8 PEM in the account JSON's `private_key`), and the tests' own keys.
///
/// OpenSSL 3 allows concurrent signing with one key, so instances are
/// shared freely across threads. The key's bytes are never printed: the
/// type has no description of them.
public final class RSAPrivateKey: @unchecked Sendable {
    /// Owned reference; freed in `deinit`.
    package let pkey: OpaquePointer

    /// The matching public key.
    public let publicKey: PublicKey

    /// Largest PEM text read. An 8192-bit PKCS#8 key is about 6.4 kB.
    public static let pemBytesMax = 16 * 1024

    /// Why a key was refused or a signature not made. The cases name no key
    /// material, so they are safe to log.
    public enum KeyError: Error, Equatable, CustomStringConvertible {
        /// Not an unencrypted PEM private key OpenSSL can read.
        case unreadable
        /// A private key, but not an RSA key (EC, Ed25519, RSA-PSS, …).
        case notRSA
        /// An RSA key whose modulus is below `PublicKey.rsaModulusBitsMin`.
        case tooSmall(bits: Int)
        /// An RSA key whose modulus is above `PublicKey.rsaModulusBitsMax`.
        case tooLarge(bits: Int)
        /// OpenSSL failed to sign (it should not with a good key).
        case signingFailed

        public var description: String {
            switch self {
            case .unreadable: "not an unencrypted PEM private key (PKCS#8, as in a service account's private_key)"
            case .notRSA: "not an RSA key, which RS256 needs"
            case .tooSmall(let bits): "RSA key of \(bits) bits is below the \(PublicKey.rsaModulusBitsMin)-bit minimum"
            case .tooLarge(let bits): "RSA key of \(bits) bits is above the \(PublicKey.rsaModulusBitsMax)-bit maximum"
            case .signingFailed: "signing failed"
            }
        }
    }

    /// Generates a fresh key with public exponent 65537. Takes tens of
    /// milliseconds at 2048 bits and grows steeply with size.
    public init(bits: Int = 2048) {
        precondition(
            bits >= PublicKey.rsaModulusBitsMin && bits <= PublicKey.rsaModulusBitsMax,
            "RSA key size out of range"
        )
        let generated = generateKey(EVP_PKEY_RSA, "RSA") { EVP_PKEY_CTX_set_rsa_keygen_bits($0, Int32(bits)) }
        self.pkey = generated
        // The public half shares the key object; one more reference for it.
        precondition(EVP_PKEY_up_ref(generated) == 1, "EVP_PKEY_up_ref failed")
        self.publicKey = PublicKey(owning: generated)
    }

    /// Reads a PEM RSA private key: PKCS#8 (`-----BEGIN PRIVATE KEY-----`)
    /// or the traditional PKCS#1 form (`-----BEGIN RSA PRIVATE KEY-----`).
    ///
    /// Encrypted keys are refused as unreadable rather than prompting for a
    /// passphrase, which OpenSSL would otherwise do on the terminal. OpenSSL's
    /// error text is dropped: it may quote the input.
    public init(pem: String) throws(KeyError) {
        let bytes = Array(pem.utf8)
        guard !bytes.isEmpty, bytes.count <= Self.pemBytesMax else { throw .unreadable }
        ERR_clear_error()
        defer { ERR_clear_error() }
        guard let read = readPrivateKeyPEM(pem) else { throw .unreadable }
        guard PublicKey.isRSA(read) else {
            EVP_PKEY_free(read)
            throw .notRSA
        }
        let bits = Int(EVP_PKEY_get_bits(read))
        guard bits >= PublicKey.rsaModulusBitsMin else {
            EVP_PKEY_free(read)
            throw .tooSmall(bits: bits)
        }
        guard bits <= PublicKey.rsaModulusBitsMax else {
            EVP_PKEY_free(read)
            throw .tooLarge(bits: bits)
        }
        self.pkey = read
        precondition(EVP_PKEY_up_ref(read) == 1, "EVP_PKEY_up_ref failed")
        self.publicKey = PublicKey(owning: read)
    }

    deinit {
        EVP_PKEY_free(pkey)
    }

    /// The key as unencrypted PKCS#8 PEM, the form of a service account's
    /// `private_key`, whichever form it was read from.
    public var pkcs8PEM: String { Crypto.pkcs8PEM(of: pkey) }

    /// Signs `message` with RS256 (RFC 7518 §3.3): RSASSA-PKCS1-v1_5 over
    /// SHA-256. The signature has as many bytes as the modulus, and is the
    /// same every time for the same key and message.
    public func signRS256(_ message: some Collection<UInt8>) throws(KeyError) -> [UInt8] {
        ERR_clear_error()
        defer { ERR_clear_error() }
        guard let context = EVP_MD_CTX_new() else { throw .signingFailed }
        defer { EVP_MD_CTX_free(context) }
        // Owned by `context`; set here so the padding does not rest on a default.
        var keyContext: OpaquePointer?
        guard EVP_DigestSignInit(context, &keyContext, EVP_sha256(), nil, pkey) == 1,
              EVP_PKEY_CTX_set_rsa_padding(keyContext, RSA_PKCS1_PADDING) == 1
        else { throw .signingFailed }
        let expectedCount = Int(EVP_PKEY_get_size(pkey))
        let signature: [UInt8]? = withBytePointer(message) { pointer, count in
            var length = 0
            guard EVP_DigestSign(context, nil, &length, pointer, count) == 1, length == expectedCount else {
                return nil
            }
            var signature = [UInt8](repeating: 0, count: length)
            guard EVP_DigestSign(context, &signature, &length, pointer, count) == 1, length == expectedCount else {
                return nil
            }
            return signature
        }
        guard let signature else { throw .signingFailed }
        return signature
    }
}
