import Synchronization

/// Request ids: the client's own when it is reasonable, else a random one.
enum RequestID {
    static let lengthMax = 128

    /// `candidate` when it is 1...128 visible ASCII characters (0x21...0x7E);
    /// anything else could smuggle spaces or control characters into logs.
    static func accepting(_ candidate: String?) -> String? {
        guard let candidate else { return nil }
        let bytes = candidate.utf8
        guard (1...lengthMax).contains(bytes.count), bytes.allSatisfy({ (0x21...0x7E).contains($0) }) else {
            return nil
        }
        return candidate
    }

    /// 16 lowercase hex digits: a per-process counter, offset by a random
    /// start and scrambled by a bijective mix, so ids never repeat within a
    /// process, look random, and cost no system call (drawing 64 random bits
    /// per request was one `getrandom` each).
    static func generate() -> String {
        let value = mix(counter.wrappingAdd(1, ordering: .relaxed).oldValue)
        let digits = Array("0123456789abcdef".utf8)
        return String(unsafeUninitializedCapacity: 16) { buffer in
            for index in 0..<16 {
                buffer[index] = digits[Int((value >> UInt64(60 - 4 * index)) & 0xF)]
            }
            return 16
        }
    }

    private static let counter = Atomic<UInt64>({
        var generator = SystemRandomNumberGenerator()
        return generator.next()
    }())

    /// SplitMix64's finalizer: a bijection on 64-bit values.
    static func mix(_ input: UInt64) -> UInt64 {
        var value = input
        value = (value ^ (value >> 30)) &* 0xbf58_476d_1ce4_e5b9
        value = (value ^ (value >> 27)) &* 0x94d0_49bb_1331_11eb
        return value ^ (value >> 31)
    }
}
