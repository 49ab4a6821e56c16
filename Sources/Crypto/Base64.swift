/// Base64url without padding (RFC 4648 §5), as JOSE uses it (RFC 7515 §2).
///
/// Decoding is strict: only the URL-safe alphabet, no padding, no whitespace,
/// and the unused low bits of the last character must be zero, so every byte
/// string has exactly one accepted encoding.
public enum Base64URL {
    public static func encode(_ bytes: some Collection<UInt8>) -> String {
        Base64Codec.encode(bytes, alphabet: Base64Codec.urlAlphabet, padded: false)
    }

    public static func decode(_ text: String) -> [UInt8]? {
        decode(ascii: Array(text.utf8))
    }

    public static func decode(ascii: some Collection<UInt8>) -> [UInt8]? {
        Base64Codec.decode(Array(ascii), table: Base64Codec.urlTable, padded: false)
    }
}

/// Standard Base64 with padding (RFC 4648 §4), as X.509 chains in a JWS
/// `x5c` header use it (RFC 7515 §4.1.6).
///
/// Decoding is strict in the same way as `Base64URL`: the standard alphabet,
/// correct padding, no whitespace, and canonical final bits.
public enum Base64 {
    public static func encode(_ bytes: some Collection<UInt8>) -> String {
        Base64Codec.encode(bytes, alphabet: Base64Codec.standardAlphabet, padded: true)
    }

    public static func decode(_ text: String) -> [UInt8]? {
        Base64Codec.decode(Array(text.utf8), table: Base64Codec.standardTable, padded: true)
    }
}

enum Base64Codec {
    static let standardAlphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/".utf8)
    static let urlAlphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".utf8)
    static let standardTable = decodingTable(standardAlphabet)
    static let urlTable = decodingTable(urlAlphabet)

    private static let invalid: UInt8 = 0xff
    private static let paddingCharacter = UInt8(ascii: "=")

    private static func decodingTable(_ alphabet: [UInt8]) -> [UInt8] {
        var table = [UInt8](repeating: invalid, count: 256)
        for (value, character) in alphabet.enumerated() {
            table[Int(character)] = UInt8(value)
        }
        return table
    }

    static func encode(_ bytes: some Collection<UInt8>, alphabet: [UInt8], padded: Bool) -> String {
        let input = Array(bytes)
        var output: [UInt8] = []
        output.reserveCapacity((input.count + 2) / 3 * 4)
        var index = 0
        while index + 3 <= input.count {
            let group = UInt32(input[index]) << 16 | UInt32(input[index + 1]) << 8 | UInt32(input[index + 2])
            output.append(alphabet[Int(group >> 18 & 0x3f)])
            output.append(alphabet[Int(group >> 12 & 0x3f)])
            output.append(alphabet[Int(group >> 6 & 0x3f)])
            output.append(alphabet[Int(group & 0x3f)])
            index += 3
        }
        switch input.count - index {
        case 1:
            let group = UInt32(input[index]) << 16
            output.append(alphabet[Int(group >> 18 & 0x3f)])
            output.append(alphabet[Int(group >> 12 & 0x3f)])
            if padded { output.append(contentsOf: [paddingCharacter, paddingCharacter]) }
        case 2:
            let group = UInt32(input[index]) << 16 | UInt32(input[index + 1]) << 8
            output.append(alphabet[Int(group >> 18 & 0x3f)])
            output.append(alphabet[Int(group >> 12 & 0x3f)])
            output.append(alphabet[Int(group >> 6 & 0x3f)])
            if padded { output.append(paddingCharacter) }
        default:
            break
        }
        return String(decoding: output, as: UTF8.self)
    }

    static func decode(_ input: [UInt8], table: [UInt8], padded: Bool) -> [UInt8]? {
        var characters = input[...]
        if padded {
            guard input.count % 4 == 0 else { return nil }
            var paddingCount = 0
            while paddingCount < 2, characters.last == paddingCharacter {
                characters.removeLast()
                paddingCount += 1
            }
        }
        // A single leftover character carries only 6 bits: never a whole byte.
        let remainder = characters.count % 4
        guard remainder != 1 else { return nil }

        var values: [UInt8] = []
        values.reserveCapacity(characters.count)
        for character in characters {
            let value = table[Int(character)]
            guard value != invalid else { return nil }
            values.append(value)
        }

        var output: [UInt8] = []
        output.reserveCapacity(values.count * 3 / 4)
        var index = 0
        while index + 4 <= values.count {
            let group = UInt32(values[index]) << 18 | UInt32(values[index + 1]) << 12
                | UInt32(values[index + 2]) << 6 | UInt32(values[index + 3])
            output.append(UInt8(truncatingIfNeeded: group >> 16))
            output.append(UInt8(truncatingIfNeeded: group >> 8))
            output.append(UInt8(truncatingIfNeeded: group))
            index += 4
        }
        switch remainder {
        case 2:
            // Canonical form: the last character's low 4 bits are unused and zero.
            guard values[index + 1] & 0x0f == 0 else { return nil }
            output.append(values[index] << 2 | values[index + 1] >> 4)
        case 3:
            // Canonical form: the last character's low 2 bits are unused and zero.
            guard values[index + 2] & 0x03 == 0 else { return nil }
            output.append(values[index] << 2 | values[index + 1] >> 4)
            output.append(values[index + 1] << 4 | values[index + 2] >> 2)
        default:
            break
        }
        return output
    }
}
