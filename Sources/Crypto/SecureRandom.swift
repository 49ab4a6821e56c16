import COpenSSL

/// Bytes from OpenSSL's CSPRNG.
public enum SecureRandom {
    /// Largest request served in one call; the service never needs more.
    public static let requestBytesMax = 1 << 20

    /// Returns `count` random bytes. A generator failure stops the process:
    /// carrying on without randomness would mint guessable identifiers and keys.
    public static func bytes(count: Int) -> [UInt8] {
        precondition(count >= 0 && count <= requestBytesMax, "random byte count out of range")
        var bytes = [UInt8](repeating: 0, count: count)
        if count == 0 { return bytes }
        guard RAND_bytes(&bytes, Int32(count)) == 1 else {
            fatalError("RAND_bytes failed: \(drainOpenSSLErrors())")
        }
        return bytes
    }
}

/// Compares two byte strings in time that depends only on their lengths.
///
/// Collections of different lengths compare unequal at once, so only the
/// length leaks. Use it for MACs, tokens and other secrets.
public func constantTimeEquals(_ a: some Collection<UInt8>, _ b: some Collection<UInt8>) -> Bool {
    guard a.count == b.count else { return false }
    return withBytePointer(a) { aPointer, count in
        withBytePointer(b) { bPointer, _ in
            CRYPTO_memcmp(aPointer, bPointer, count) == 0
        }
    }
}
