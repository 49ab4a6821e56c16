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

    /// 16 lowercase hex digits (64 random bits).
    static func generate() -> String {
        var generator = SystemRandomNumberGenerator()
        let value: UInt64 = generator.next()
        let digits = Array("0123456789abcdef".utf8)
        return String(unsafeUninitializedCapacity: 16) { buffer in
            for index in 0..<16 {
                buffer[index] = digits[Int((value >> UInt64(60 - 4 * index)) & 0xF)]
            }
            return 16
        }
    }
}
