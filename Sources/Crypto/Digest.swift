import COpenSSL

/// SHA-256 (FIPS 180-4).
public enum SHA256 {
    public static let byteCount = 32

    public static func hash(_ data: some Collection<UInt8>) -> [UInt8] {
        var digest = [UInt8](repeating: 0, count: byteCount)
        var length: UInt32 = 0
        let ok = withBytePointer(data) { pointer, count in
            EVP_Digest(pointer, count, &digest, &length, FetchedDigest.sha256.method, nil)
        }
        // Hashing memory cannot fail short of a broken library.
        precondition(ok == 1 && length == UInt32(byteCount), "EVP_Digest(SHA-256) failed")
        return digest
    }

    /// The digest as lowercase hexadecimal.
    public static func hex(_ data: some Collection<UInt8>) -> String {
        hexString(hash(data))
    }
}

/// SHA-1 (FIPS 180-4).
///
/// Broken for collision resistance: never use it to sign, authenticate or
/// fingerprint anything. It is here because name-based UUIDs (RFC 9562
/// §5.5, version 5) are defined over SHA-1, and there only the bit pattern
/// matters.
public enum SHA1 {
    public static let byteCount = 20

    public static func hash(_ data: some Collection<UInt8>) -> [UInt8] {
        var digest = [UInt8](repeating: 0, count: byteCount)
        var length: UInt32 = 0
        let ok = withBytePointer(data) { pointer, count in
            EVP_Digest(pointer, count, &digest, &length, EVP_sha1(), nil)
        }
        // As for SHA-256: hashing memory cannot fail short of a broken library.
        precondition(ok == 1 && length == UInt32(byteCount), "EVP_Digest(SHA-1) failed")
        return digest
    }
}

/// HMAC with SHA-256 (RFC 2104), for keys of any length, including empty.
public enum HMACSHA256 {
    public static let byteCount = 32

    public static func authenticationCode(
        key: some Collection<UInt8>,
        message: some Collection<UInt8>
    ) -> [UInt8] {
        precondition(key.count <= Int(Int32.max), "HMAC key too long")
        var code = [UInt8](repeating: 0, count: byteCount)
        var length: UInt32 = 0
        let result = withBytePointer(key) { keyPointer, keyCount in
            withBytePointer(message) { messagePointer, messageCount in
                HMAC(EVP_sha256(), keyPointer, Int32(keyCount), messagePointer, messageCount, &code, &length)
            }
        }
        precondition(result != nil && length == UInt32(byteCount), "HMAC-SHA256 failed")
        return code
    }
}

/// Lowercase hexadecimal, two digits per byte.
public func hexString(_ bytes: some Collection<UInt8>) -> String {
    let digits = Array("0123456789abcdef".utf8)
    var text: [UInt8] = []
    text.reserveCapacity(bytes.count * 2)
    for byte in bytes {
        text.append(digits[Int(byte >> 4)])
        text.append(digits[Int(byte & 0x0f)])
    }
    return String(decoding: text, as: UTF8.self)
}

/// A digest method fetched from the default provider once. OpenSSL 3 looks
/// an implicit method such as `EVP_sha256()` up again, under a lock, on every
/// use; a fetched one is ready. Fetched methods are immutable and safe to
/// share between threads.
struct FetchedDigest: @unchecked Sendable {
    let method: OpaquePointer

    static let sha256 = FetchedDigest(name: "SHA2-256")

    private init(name: String) {
        guard let method = EVP_MD_fetch(nil, name, nil) else {
            preconditionFailure("OpenSSL has no \(name) digest")
        }
        self.method = method
    }
}
