import Crypto
import Testing

@Suite struct DigestTests {
    // FIPS 180-2 appendix B and the usual empty-input value.
    @Test(.timeLimit(.minutes(1)))
    func sha256KnownAnswers() {
        #expect(SHA256.hex([UInt8]()) == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
        #expect(SHA256.hex(Array("abc".utf8)) == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
        #expect(
            SHA256.hex(Array("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq".utf8))
                == "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"
        )
        #expect(
            SHA256.hex([UInt8](repeating: UInt8(ascii: "a"), count: 1_000_000))
                == "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0"
        )
    }

    @Test(.timeLimit(.minutes(1)))
    func sha256AcceptsNonContiguousCollections() {
        let message = Array("abc".utf8)
        #expect(SHA256.hash(message.lazy.map { $0 }) == SHA256.hash(message))
        #expect(SHA256.hash("abc".utf8) == SHA256.hash(message))
        #expect(SHA256.hash(message).count == 32)
    }

    // FIPS 180-2 appendix A and the usual empty-input value.
    @Test(.timeLimit(.minutes(1)))
    func sha1KnownAnswers() {
        func hex(_ message: [UInt8]) -> String { hexString(SHA1.hash(message)) }
        #expect(hex([]) == "da39a3ee5e6b4b0d3255bfef95601890afd80709")
        #expect(hex(Array("abc".utf8)) == "a9993e364706816aba3e25717850c26c9cd0d89d")
        #expect(
            hex(Array("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq".utf8))
                == "84983e441c3bd26ebaae4aa1f95129e5e54670f1"
        )
        #expect(
            hex([UInt8](repeating: UInt8(ascii: "a"), count: 1_000_000))
                == "34aa973cd4c4daa4f61eeb2bdbad27316534016f"
        )
        #expect(SHA1.hash("abc".utf8.lazy.map { $0 }) == SHA1.hash(Array("abc".utf8)))
        #expect(SHA1.hash([UInt8]()).count == SHA1.byteCount)
    }

    // RFC 4231 §4.2–4.8.
    @Test(.timeLimit(.minutes(1)))
    func hmacRFC4231() {
        func mac(_ key: [UInt8], _ message: [UInt8]) -> String {
            hexString(HMACSHA256.authenticationCode(key: key, message: message))
        }
        #expect(
            mac([UInt8](repeating: 0x0b, count: 20), Array("Hi There".utf8))
                == "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"
        )
        #expect(
            mac(Array("Jefe".utf8), Array("what do ya want for nothing?".utf8))
                == "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        )
        #expect(
            mac([UInt8](repeating: 0xaa, count: 20), [UInt8](repeating: 0xdd, count: 50))
                == "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe"
        )
        #expect(
            mac(Array(1...25), [UInt8](repeating: 0xcd, count: 50))
                == "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b"
        )
        // Test case 5 checks only the first 128 bits.
        #expect(
            mac([UInt8](repeating: 0x0c, count: 20), Array("Test With Truncation".utf8)).prefix(32)
                == "a3b6167473100ee06e0c796c2955552b"
        )
        #expect(
            mac(
                [UInt8](repeating: 0xaa, count: 131),
                Array("Test Using Larger Than Block-Size Key - Hash Key First".utf8)
            ) == "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"
        )
        #expect(
            mac(
                [UInt8](repeating: 0xaa, count: 131),
                Array(
                    ("This is a test using a larger than block-size key and a larger than block-size data."
                        + " The key needs to be hashed before being used by the HMAC algorithm.").utf8
                )
            ) == "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2"
        )
    }

    @Test(.timeLimit(.minutes(1)))
    func hmacWithEmptyKeyAndMessage() {
        #expect(
            hexString(HMACSHA256.authenticationCode(key: [UInt8](), message: [UInt8]()))
                == "b613679a0814d9ec772f95d778c35fc5ff1697c493715653c6c712144292c5ad"
        )
    }

    @Test(.timeLimit(.minutes(1)))
    func constantTimeEqualsComparesContentAndLength() {
        #expect(constantTimeEquals([UInt8](), [UInt8]()))
        #expect(constantTimeEquals([1, 2, 3] as [UInt8], [1, 2, 3] as [UInt8]))
        #expect(!constantTimeEquals([1, 2, 3] as [UInt8], [1, 2, 4] as [UInt8]))
        #expect(!constantTimeEquals([1, 2, 3] as [UInt8], [1, 2] as [UInt8]))
        #expect(!constantTimeEquals([UInt8](), [0] as [UInt8]))
        #expect(constantTimeEquals("abc".utf8, [0x61, 0x62, 0x63] as [UInt8]))
    }

    @Test(.timeLimit(.minutes(1)))
    func secureRandomReturnsTheRequestedCount() {
        #expect(SecureRandom.bytes(count: 0).isEmpty)
        let first = SecureRandom.bytes(count: 32)
        let second = SecureRandom.bytes(count: 32)
        #expect(first.count == 32)
        // 2^-256 chance of a false failure.
        #expect(first != second)
    }
}
