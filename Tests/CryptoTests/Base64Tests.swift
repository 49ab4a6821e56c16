import Crypto
import Testing

@Suite struct Base64Tests {
    // RFC 4648 §10, without padding for the URL form.
    @Test(.timeLimit(.minutes(1)))
    func rfc4648Vectors() {
        let cases: [(String, String, String)] = [
            ("", "", ""),
            ("f", "Zg==", "Zg"),
            ("fo", "Zm8=", "Zm8"),
            ("foo", "Zm9v", "Zm9v"),
            ("foob", "Zm9vYg==", "Zm9vYg"),
            ("fooba", "Zm9vYmE=", "Zm9vYmE"),
            ("foobar", "Zm9vYmFy", "Zm9vYmFy"),
        ]
        for (plain, standard, url) in cases {
            #expect(Base64.encode(Array(plain.utf8)) == standard)
            #expect(Base64URL.encode(Array(plain.utf8)) == url)
            #expect(Base64.decode(standard) == Array(plain.utf8))
            #expect(Base64URL.decode(url) == Array(plain.utf8))
        }
    }

    @Test(.timeLimit(.minutes(1)))
    func alphabetsDiffer() {
        let bytes: [UInt8] = [0xfb, 0xff, 0xbf]
        #expect(Base64.encode(bytes) == "+/+/")
        #expect(Base64URL.encode(bytes) == "-_-_")
        #expect(Base64URL.decode("+/+/") == nil)
        #expect(Base64.decode("-_-_") == nil)
    }

    @Test(.timeLimit(.minutes(1)))
    func strictDecodingRejectsNonCanonicalInput() {
        // Padding is not part of base64url in JOSE.
        #expect(Base64URL.decode("Zg==") == nil)
        // Standard base64 requires it.
        #expect(Base64.decode("Zg") == nil)
        #expect(Base64.decode("Zg=") == nil)
        #expect(Base64.decode("Z===") == nil)
        #expect(Base64.decode("Zg==Zg==") == nil)
        // Whitespace and foreign characters.
        #expect(Base64URL.decode("Zm9v YmFy") == nil)
        #expect(Base64URL.decode("Zm9v\nYmFy") == nil)
        #expect(Base64.decode("Zm9v\r\nYmFy") == nil)
        #expect(Base64URL.decode("Zm9v.") == nil)
        #expect(Base64URL.decode("Zé") == nil)
        // A lone trailing character cannot carry a byte.
        #expect(Base64URL.decode("Zm9vY") == nil)
        // Non-zero unused bits: "Zh" and "Zm9" decode to the same bytes as
        // "Zg" and "Zm8" in lenient decoders.
        #expect(Base64URL.decode("Zh") == nil)
        #expect(Base64URL.decode("Zm9") == nil)
        #expect(Base64.decode("Zh==") == nil)
    }

    @Test(.timeLimit(.minutes(1)))
    func roundTripsEveryLength() {
        for length in 0..<70 {
            let bytes = (0..<length).map { UInt8(truncatingIfNeeded: $0 &* 37 &+ 11) }
            #expect(Base64URL.decode(Base64URL.encode(bytes)) == bytes)
            #expect(Base64.decode(Base64.encode(bytes)) == bytes)
        }
    }
}
