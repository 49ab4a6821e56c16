import COpenSSL

/// RS256 (RFC 7518 §3.3: RSASSA-PKCS1-v1_5 with SHA-256) on public keys, and
/// RSA public keys built from a JSON Web Key's `n` and `e` (RFC 7518 §6.3.1).
extension PublicKey {
    /// Smallest RSA modulus accepted anywhere, in bits. RFC 7518 §3.3
    /// requires 2048 for RS256; 1024-bit moduli are within reach of a
    /// well-funded factoring effort.
    public static let rsaModulusBitsMin = 2048

    /// Largest RSA modulus accepted, in bits. Real keys stop at 4096 (Google's
    /// are 2048); the bound keeps the cost of one verification known when the
    /// key comes from a fetched JWKS.
    public static let rsaModulusBitsMax = 8192

    /// Largest public exponent accepted, in bytes. OpenSSL refuses exponents
    /// over 64 bits for large moduli, and real keys use 65537 (three bytes).
    public static let rsaExponentBytesMax = 8

    /// Why `rsa(modulus:exponent:)` refused its input. The cases name no
    /// input bytes, so they are safe to log.
    public enum RSAComponentsError: Error, Equatable, CustomStringConvertible {
        /// The modulus has fewer than `rsaModulusBitsMin` bits.
        case tooSmall(bits: Int)
        /// The modulus has more than `rsaModulusBitsMax` bits.
        case tooLarge(bits: Int)
        /// The modulus is even, so it is not a product of two odd primes.
        case badModulus
        /// The exponent is even, less than 3, or longer than `rsaExponentBytesMax`.
        case badExponent
        /// OpenSSL would not build a key from otherwise acceptable numbers.
        case unusable

        public var description: String {
            switch self {
            case .tooSmall(let bits): "RSA modulus of \(bits) bits is below the \(PublicKey.rsaModulusBitsMin)-bit minimum"
            case .tooLarge(let bits): "RSA modulus of \(bits) bits is above the \(PublicKey.rsaModulusBitsMax)-bit maximum"
            case .badModulus: "RSA modulus is even"
            case .badExponent: "RSA public exponent is even, below 3 or too long"
            case .unusable: "RSA public key could not be built"
            }
        }
    }

    /// Builds an RSA public key from its modulus and public exponent, both
    /// big-endian unsigned integers as a JWK's `n` and `e` decode to.
    ///
    /// Leading zero bytes are ignored: RFC 7518 forbids them in `n`, but some
    /// libraries emit one, and the value is the same. The size, parity and
    /// exponent checks come first so that no refused input reaches OpenSSL.
    public static func rsa(modulus: [UInt8], exponent: [UInt8]) throws(RSAComponentsError) -> PublicKey {
        let n = modulus.drop { $0 == 0 }
        let e = exponent.drop { $0 == 0 }
        let bits = bitCount(n)
        guard bits >= rsaModulusBitsMin else { throw .tooSmall(bits: bits) }
        guard bits <= rsaModulusBitsMax else { throw .tooLarge(bits: bits) }
        guard let last = n.last, last & 1 == 1 else { throw .badModulus }
        guard let lastOfExponent = e.last, lastOfExponent & 1 == 1, bitCount(e) >= 2,
              e.count <= rsaExponentBytesMax
        else { throw .badExponent }
        guard let pkey = makeRSAPublicKey(modulus: Array(n), exponent: Array(e)) else { throw .unusable }
        let key = PublicKey(owning: pkey)
        // The bit count OpenSSL sees must be the one checked above.
        guard key.isRSA, key.rsaBits == bits else { throw .unusable }
        return key
    }

    /// The modulus and public exponent of an RSA key, big-endian with no
    /// leading zero bytes (the JWK `n` and `e` before base64url); nil for a
    /// key of any other kind.
    public var rsaComponents: (modulus: [UInt8], exponent: [UInt8])? {
        guard isRSA else { return nil }
        ERR_clear_error()
        defer { ERR_clear_error() }
        guard let modulus = bigNumberParameter(OSSL_PKEY_PARAM_RSA_N),
              let exponent = bigNumberParameter(OSSL_PKEY_PARAM_RSA_E)
        else { return nil }
        return (modulus, exponent)
    }

    /// Verifies an RS256 signature (RFC 7518 §3.3): RSASSA-PKCS1-v1_5 over
    /// SHA-256, given as exactly as many bytes as the modulus.
    ///
    /// Returns false for a key that is not RSA, a modulus outside the accepted
    /// sizes, a signature of any other length, and a signature that does not
    /// verify. PKCS#1 v1.5 has one valid signature per message and key, and
    /// OpenSSL compares the whole decoded block, so there is no malleability to
    /// guard against here.
    public func verifyRS256(signature: [UInt8], message: some Collection<UInt8>) -> Bool {
        guard isRSA, let bits = rsaBits,
              bits >= Self.rsaModulusBitsMin, bits <= Self.rsaModulusBitsMax,
              signature.count == (bits + 7) / 8
        else { return false }
        ERR_clear_error()
        defer { ERR_clear_error() }
        guard let context = EVP_MD_CTX_new() else { return false }
        defer { EVP_MD_CTX_free(context) }
        // Owned by `context`; set here so the padding does not rest on a default.
        var keyContext: OpaquePointer?
        guard EVP_DigestVerifyInit(context, &keyContext, EVP_sha256(), nil, pkey) == 1,
              EVP_PKEY_CTX_set_rsa_padding(keyContext, RSA_PKCS1_PADDING) == 1
        else { return false }
        let result = signature.withUnsafeBufferPointer { signature in
            withBytePointer(message) { pointer, count in
                EVP_DigestVerify(context, signature.baseAddress, signature.count, pointer, count)
            }
        }
        return result == 1
    }

    static func isRSA(_ pkey: OpaquePointer) -> Bool {
        EVP_PKEY_get_base_id(pkey) == EVP_PKEY_RSA
    }

    /// Significant bits in a big-endian unsigned integer with no leading zero bytes.
    private static func bitCount(_ bytes: ArraySlice<UInt8>) -> Int {
        guard let first = bytes.first else { return 0 }
        return (bytes.count - 1) * 8 + (UInt8.bitWidth - first.leadingZeroBitCount)
    }

    /// An `EVP_PKEY` holding only the public half, or nil if OpenSSL refuses.
    /// Goes through the OpenSSL 3 key-management API; the `RSA_*` setters are
    /// deprecated.
    private static func makeRSAPublicKey(modulus: [UInt8], exponent: [UInt8]) -> OpaquePointer? {
        ERR_clear_error()
        defer { ERR_clear_error() }
        let n = modulus.withUnsafeBufferPointer { BN_bin2bn($0.baseAddress, Int32($0.count), nil) }
        let e = exponent.withUnsafeBufferPointer { BN_bin2bn($0.baseAddress, Int32($0.count), nil) }
        defer {
            BN_free(n)
            BN_free(e)
        }
        guard let n, let e else { return nil }
        // The parameter array keeps the name pointers it is given, not copies,
        // so the C strings must outlive `EVP_PKEY_fromdata`: a Swift string
        // passed straight to a C argument lives only for that one call.
        return OSSL_PKEY_PARAM_RSA_N.withCString { nName in
            OSSL_PKEY_PARAM_RSA_E.withCString { eName in
                "RSA".withCString { algorithm in
                    guard let builder = OSSL_PARAM_BLD_new() else { return nil }
                    defer { OSSL_PARAM_BLD_free(builder) }
                    // The builder copies the numbers when it makes the array.
                    guard OSSL_PARAM_BLD_push_BN(builder, nName, n) == 1,
                          OSSL_PARAM_BLD_push_BN(builder, eName, e) == 1,
                          let parameters = OSSL_PARAM_BLD_to_param(builder)
                    else { return nil }
                    defer { OSSL_PARAM_free(parameters) }
                    guard let context = EVP_PKEY_CTX_new_from_name(nil, algorithm, nil) else { return nil }
                    defer { EVP_PKEY_CTX_free(context) }
                    var pkey: OpaquePointer?
                    guard EVP_PKEY_fromdata_init(context) == 1,
                          EVP_PKEY_fromdata(context, &pkey, COpenSSL_EVP_PKEY_PUBLIC_KEY(), parameters) == 1
                    else {
                        EVP_PKEY_free(pkey)
                        return nil
                    }
                    return pkey
                }
            }
        }
    }

    /// One of the key's integer parameters, big-endian and minimal.
    private func bigNumberParameter(_ name: String) -> [UInt8]? {
        var number: OpaquePointer?
        guard EVP_PKEY_get_bn_param(pkey, name, &number) == 1, let number else { return nil }
        defer { BN_free(number) }
        let count = (Int(BN_num_bits(number)) + 7) / 8
        var bytes = [UInt8](repeating: 0, count: count)
        let written = bytes.withUnsafeMutableBufferPointer { BN_bn2bin(number, $0.baseAddress) }
        return Int(written) == count ? bytes : nil
    }
}
