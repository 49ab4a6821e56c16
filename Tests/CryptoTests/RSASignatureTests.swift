import Crypto
import CryptoTestSupport
import Dispatch
import Foundation
import Testing

@Suite struct RSASignatureTests {
    let message = Array("header.payload".utf8)

    @Test(.timeLimit(.minutes(1)))
    func signatureRoundTrip() throws {
        let key = RSAPrivateKey()
        #expect(key.publicKey.isRSA)
        #expect(!key.publicKey.isP256)
        #expect(key.publicKey.rsaBits == 2048)
        let signature = try key.signRS256(message)
        #expect(signature.count == 256)
        #expect(key.publicKey.verifyRS256(signature: signature, message: message))
        #expect(key.publicKey.verifyRS256(signature: signature, message: "header.payload".utf8))
        // PKCS#1 v1.5 is deterministic.
        #expect(try key.signRS256(message) == signature)
    }

    @Test(.timeLimit(.minutes(1)))
    func flippedBitOrOtherKeyIsRejected() throws {
        let key = RSAPrivateKey()
        let other = RSAPrivateKey()
        let signature = try key.signRS256(message)
        #expect(!other.publicKey.verifyRS256(signature: signature, message: message))
        #expect(!key.publicKey.verifyRS256(signature: signature, message: Array("header.payloaD".utf8)))
        #expect(!key.publicKey.verifyRS256(signature: signature, message: Array("header.payload.".utf8)))
        #expect(!key.publicKey.verifyRS256(signature: signature, message: []))
        for index in [0, 1, 127, 254, 255] {
            var flipped = signature
            flipped[index] ^= 0x01
            #expect(!key.publicKey.verifyRS256(signature: flipped, message: message))
        }
        var flippedMessage = message
        flippedMessage[3] ^= 0x80
        #expect(!key.publicKey.verifyRS256(signature: signature, message: flippedMessage))
    }

    @Test(.timeLimit(.minutes(1)))
    func truncatedEmptyAndOutOfRangeSignaturesAreRejected() throws {
        let key = try RSAPrivateKey(pem: RSAVectors.pkcs8PEM)
        let signature = try key.signRS256(message)
        let publicKey = key.publicKey
        #expect(!publicKey.verifyRS256(signature: [], message: message))
        #expect(!publicKey.verifyRS256(signature: [], message: []))
        #expect(!publicKey.verifyRS256(signature: Array(signature.dropLast()), message: message))
        #expect(!publicKey.verifyRS256(signature: Array(signature.dropFirst()), message: message))
        #expect(!publicKey.verifyRS256(signature: [0] + signature, message: message))
        #expect(!publicKey.verifyRS256(signature: signature + [0], message: message))
        #expect(!publicKey.verifyRS256(signature: signature + signature, message: message))
        #expect(!publicKey.verifyRS256(signature: [UInt8](repeating: 0, count: 256), message: message))
        // Numerically above the modulus.
        #expect(!publicKey.verifyRS256(signature: [UInt8](repeating: 0xff, count: 256), message: message))
        #expect(!publicKey.verifyRS256(signature: [UInt8](repeating: 0, count: 255) + [1], message: message))
    }

    @Test(.timeLimit(.minutes(1)))
    func keyReadBackAndRebuiltFromComponentsVerifies() throws {
        let key = RSAPrivateKey()
        let signature = try key.signRS256(message)

        let pem = key.pkcs8PEM
        #expect(pem.hasPrefix("-----BEGIN PRIVATE KEY-----\n"))
        let readBack = try RSAPrivateKey(pem: pem)
        #expect(readBack.pkcs8PEM == pem)
        #expect(readBack.publicKey.verifyRS256(signature: signature, message: message))
        #expect(try readBack.signRS256(message) == signature)

        let components = try #require(key.publicKey.rsaComponents)
        #expect(components.modulus.count == 256)
        #expect(components.modulus.first.map { $0 >= 0x80 } == true)
        #expect(components.modulus.last.map { $0 & 1 == 1 } == true)
        #expect(components.exponent == [0x01, 0x00, 0x01])
        let rebuilt = try PublicKey.rsa(modulus: components.modulus, exponent: components.exponent)
        #expect(rebuilt.isRSA)
        #expect(rebuilt.rsaBits == 2048)
        #expect(rebuilt.verifyRS256(signature: signature, message: message))
        #expect(rebuilt.subjectPublicKeyInfoDER == key.publicKey.subjectPublicKeyInfoDER)
        #expect(rebuilt.rsaComponents?.modulus == components.modulus)
        #expect(rebuilt.rsaComponents?.exponent == components.exponent)
        #expect(!RSAPrivateKey().publicKey.verifyRS256(signature: signature, message: message))
    }

    /// The signature `openssl dgst -sha256 -sign` made must come out of
    /// `signRS256` byte for byte, and verify against the key as published in
    /// a JWKS.
    @Test(.timeLimit(.minutes(1)))
    func knownAnswerFromOpenSSLCommandLine() throws {
        let expected = try #require(Base64.decode(RSAVectors.signatureBase64))
        let modulus = try #require(Base64URL.decode(RSAVectors.modulusBase64URL))
        let key = try RSAPrivateKey(pem: RSAVectors.pkcs8PEM)
        #expect(key.publicKey.rsaBits == 2048)
        #expect(try key.signRS256(RSAVectors.message.utf8) == expected)
        #expect(key.publicKey.verifyRS256(signature: expected, message: RSAVectors.message.utf8))
        #expect(key.publicKey.rsaComponents?.modulus == modulus)
        #expect(key.publicKey.rsaComponents?.exponent == [0x01, 0x00, 0x01])

        // As a JWKS publishes it: n and e only.
        let published = try PublicKey.rsa(modulus: modulus, exponent: [0x01, 0x00, 0x01])
        #expect(published.verifyRS256(signature: expected, message: RSAVectors.message.utf8))
        #expect(!published.verifyRS256(signature: expected, message: "\(RSAVectors.message)x".utf8))
        // A leading zero byte, as some libraries emit for n, is the same number.
        let padded = try PublicKey.rsa(modulus: [0] + modulus, exponent: [0, 0x01, 0x00, 0x01])
        #expect(padded.rsaBits == 2048)
        #expect(padded.verifyRS256(signature: expected, message: RSAVectors.message.utf8))

        // The traditional PKCS#1 form is the same key, written back as PKCS#8.
        let traditional = try RSAPrivateKey(pem: RSAVectors.traditionalPEM)
        #expect(try traditional.signRS256(RSAVectors.message.utf8) == expected)
        #expect(traditional.pkcs8PEM == key.pkcs8PEM)
        #expect(key.pkcs8PEM.trimmingCharacters(in: .newlines) == RSAVectors.pkcs8PEM)
        // As it arrives from a service account's JSON, with a final newline.
        #expect(try RSAPrivateKey(pem: RSAVectors.pkcs8PEM + "\n").signRS256(RSAVectors.message.utf8) == expected)
    }

    @Test(.timeLimit(.minutes(1)))
    func smallModulusIsRefused() {
        #expect(throws: RSAPrivateKey.KeyError.tooSmall(bits: 1024)) {
            try RSAPrivateKey(pem: RSAVectors.smallPKCS8PEM)
        }
        // 1024 bits: top bit of the first of 128 bytes set.
        let modulus1024 = [0xc1] + [UInt8](repeating: 0x5a, count: 126) + [0x01]
        #expect(throws: PublicKey.RSAComponentsError.tooSmall(bits: 1024)) {
            try PublicKey.rsa(modulus: modulus1024, exponent: [0x01, 0x00, 0x01])
        }
        // One bit short of the minimum.
        let modulus2047 = [0x7f] + [UInt8](repeating: 0x5a, count: 254) + [0x01]
        #expect(throws: PublicKey.RSAComponentsError.tooSmall(bits: 2047)) {
            try PublicKey.rsa(modulus: modulus2047, exponent: [0x01, 0x00, 0x01])
        }
        #expect(throws: PublicKey.RSAComponentsError.tooSmall(bits: 0)) {
            try PublicKey.rsa(modulus: [], exponent: [0x01, 0x00, 0x01])
        }
        #expect(throws: PublicKey.RSAComponentsError.tooSmall(bits: 0)) {
            try PublicKey.rsa(modulus: [0, 0, 0], exponent: [0x01, 0x00, 0x01])
        }
        let modulus8193 = [0x01] + [UInt8](repeating: 0x5a, count: 1023) + [0x01]
        #expect(throws: PublicKey.RSAComponentsError.tooLarge(bits: 8193)) {
            try PublicKey.rsa(modulus: modulus8193, exponent: [0x01, 0x00, 0x01])
        }
    }

    @Test(.timeLimit(.minutes(1)))
    func evenModulusAndBadExponentsAreRefused() throws {
        let modulus = try #require(Base64URL.decode(RSAVectors.modulusBase64URL))
        var even = modulus
        even[even.count - 1] &= 0xfe
        #expect(throws: PublicKey.RSAComponentsError.badModulus) {
            try PublicKey.rsa(modulus: even, exponent: [0x01, 0x00, 0x01])
        }
        let badExponents: [[UInt8]] = [
            [], [0], [1], [0, 1], [2], [0x01, 0x00, 0x00], [0x01, 0x00, 0x02],
            [0x01] + [UInt8](repeating: 0, count: 7) + [0x01],
        ]
        for exponent in badExponents {
            #expect(throws: PublicKey.RSAComponentsError.badExponent) {
                try PublicKey.rsa(modulus: modulus, exponent: exponent)
            }
        }
        // Small odd exponents are valid RSA, if unusual.
        #expect(try PublicKey.rsa(modulus: modulus, exponent: [3]).rsaBits == 2048)
        #expect(try PublicKey.rsa(modulus: modulus, exponent: [UInt8](repeating: 0xff, count: 8)).isRSA)
    }

    @Test(.timeLimit(.minutes(1)))
    func nonRSAAndUnreadableKeysAreRefused() {
        #expect(throws: RSAPrivateKey.KeyError.notRSA) { try RSAPrivateKey(pem: PrivateKey().pkcs8PEM) }
        // RS256 is PKCS#1 v1.5, which an RSA-PSS key may not make.
        #expect(throws: RSAPrivateKey.KeyError.notRSA) { try RSAPrivateKey(pem: RSAVectors.pssPKCS8PEM) }
        #expect(throws: RSAPrivateKey.KeyError.unreadable) { try RSAPrivateKey(pem: "not a key") }
        #expect(throws: RSAPrivateKey.KeyError.unreadable) { try RSAPrivateKey(pem: "") }
        #expect(throws: RSAPrivateKey.KeyError.unreadable) {
            try RSAPrivateKey(pem: "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n")
        }
        // The body cut short.
        let truncated = String(RSAVectors.pkcs8PEM.prefix(600)) + "\n-----END PRIVATE KEY-----\n"
        #expect(throws: RSAPrivateKey.KeyError.unreadable) { try RSAPrivateKey(pem: truncated) }
        // Refused without asking for a passphrase.
        #expect(throws: RSAPrivateKey.KeyError.unreadable) { try RSAPrivateKey(pem: RSAVectors.encryptedPEM) }
        // A public key is not a private key.
        let spki = RSAPrivateKey().publicKey.subjectPublicKeyInfoDER
        let publicPEM = "-----BEGIN PUBLIC KEY-----\n\(Base64.encode(spki))\n-----END PUBLIC KEY-----\n"
        #expect(throws: RSAPrivateKey.KeyError.unreadable) { try RSAPrivateKey(pem: publicPEM) }
        let oversized = RSAVectors.pkcs8PEM + String(repeating: "\n", count: RSAPrivateKey.pemBytesMax)
        #expect(throws: RSAPrivateKey.KeyError.unreadable) { try RSAPrivateKey(pem: oversized) }
    }

    @Test(.timeLimit(.minutes(1)))
    func eachAlgorithmRefusesTheOtherKind() throws {
        let rsa = try RSAPrivateKey(pem: RSAVectors.pkcs8PEM)
        let p256 = PrivateKey()
        let rsaSignature = try rsa.signRS256(message)
        let es256Signature = p256.sign(message)

        #expect(!p256.publicKey.isRSA)
        #expect(p256.publicKey.rsaBits == nil)
        #expect(p256.publicKey.rsaComponents == nil)
        #expect(!p256.publicKey.verifyRS256(signature: rsaSignature, message: message))
        #expect(!p256.publicKey.verifyRS256(signature: es256Signature, message: message))
        #expect(!p256.publicKey.verifyRS256(signature: [UInt8](repeating: 1, count: 256), message: message))

        #expect(!rsa.publicKey.isP256)
        #expect(!rsa.publicKey.verifyES256(rawSignature: es256Signature, message: message))
        #expect(!rsa.publicKey.verifyES256(rawSignature: Array(rsaSignature.prefix(64)), message: message))
        #expect(!rsa.publicKey.verifyES256(rawSignature: rsaSignature, message: message))
        // The ES256 key still verifies its own signature.
        #expect(p256.publicKey.verifyES256(rawSignature: es256Signature, message: message))
    }

    /// OpenSSL 3 documents one key as safe to use from many threads; the
    /// service signs assertions from whichever thread needs a token.
    @Test(.timeLimit(.minutes(1)))
    func oneKeySignsFromEightThreadsAtOnce() throws {
        let key = try RSAPrivateKey(pem: RSAVectors.pkcs8PEM)
        let expected = try #require(Base64.decode(RSAVectors.signatureBase64))
        let threadCount = 8
        let roundCount = 8
        let results = SignatureSlots(count: threadCount)
        let start = DispatchSemaphore(value: 0)
        let finished = DispatchGroup()
        for thread in 0..<threadCount {
            finished.enter()
            Thread {
                start.wait()
                var signatures: [[UInt8]?] = []
                for round in 0..<roundCount {
                    signatures.append(try? key.signRS256(Self.message(thread: thread, round: round)))
                }
                signatures.append(try? key.signRS256(RSAVectors.message.utf8))
                results.set(thread, signatures)
                finished.leave()
            }.start()
        }
        // Every thread is created before any is let go.
        for _ in 0..<threadCount { start.signal() }
        try #require(finished.wait(timeout: .now() + 50) == .success)

        for thread in 0..<threadCount {
            let signatures = results.get(thread)
            try #require(signatures.count == roundCount + 1)
            for round in 0..<roundCount {
                let signature = try #require(signatures[round])
                #expect(key.publicKey.verifyRS256(signature: signature, message: Self.message(thread: thread, round: round)))
            }
            #expect(signatures[roundCount] == expected)
        }
    }

    static func message(thread: Int, round: Int) -> [UInt8] {
        Array("thread \(thread) round \(round)".utf8)
    }
}

/// One slot of results per thread, written once by that thread.
private final class SignatureSlots: @unchecked Sendable {
    private let lock = NSLock()
    private var slots: [[[UInt8]?]]

    init(count: Int) {
        slots = Array(repeating: [], count: count)
    }

    func set(_ index: Int, _ signatures: [[UInt8]?]) {
        lock.lock()
        defer { lock.unlock() }
        slots[index] = signatures
    }

    func get(_ index: Int) -> [[UInt8]?] {
        lock.lock()
        defer { lock.unlock() }
        return slots[index]
    }
}

/// Fixed keys and signatures made with the `openssl` command-line tool
/// (OpenSSL 3.0), so the known-answer tests compare against an implementation
/// other than the one under test. None of these keys protects anything.
///
///     openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out key.pem
///     printf '%s' "$message" > message.txt
///     openssl dgst -sha256 -sign key.pem -out signature.bin message.txt
///     openssl base64 -A -in signature.bin
///     openssl rsa -in key.pem -traditional
///     openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:1024
///     openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -aes256 -pass pass:secret
///     openssl genpkey -algorithm RSA-PSS -pkeyopt rsa_keygen_bits:2048
enum RSAVectors {
    /// The 2048-bit key, PKCS#8, as `genpkey` writes it.
    static let pkcs8PEM = """
        -----BEGIN PRIVATE KEY-----
        MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQCca3JJ8uHb8tiP
        mnx67UosQWKQDl+oGiG6DnK5DQPEJsd5w8gvcZGCnw7EDEOtnBYGrgAHwxP8XF65
        pLG5y1t6qSh2tioG9JItgocOCFcJzfbf79AsNQQ7yWs/BW4G5YGQz+hbe34jBqyQ
        tU2jG3j0GHAqBCUJoBDo0gAdEh31myB5U3wlNZpxq7mIP1nhAc5LyNJglu5FAok9
        PX012EU0d18LPB68UZT0DN7G5JNDY3IJ3tDERI/Xa4OuYYpggvyFok7gaDuk6dy6
        HHmm9xqVp2nxgxMu7XkENbJ2iXv3GEpiX6F4nOjneYpGeZGKGCsc3eD7JXS+FdrF
        XIeqr5d1AgMBAAECggEANpAwfOUxrjTnICjGlWbiwc9JH3E0IwKCk1Fo6W5Fyw2v
        9aS61vnpxUPQtciFbzEMaeYWcp61AQoDrQRrTqFGVuJdEBP5UxXLS/7FN7rnCa+E
        F5ei6VjREj3voDs3p0Y1zRsJNag9VuCEH7Ju05/IsHU54x4xAUuJun1OttVUCBE5
        6ezWzFeNz56f+PiRfvEpVpEWF2nvQbz2vE4gotE5DgF7Xw6g9x9Y1UjdgUnSZt/L
        C7TMAB3s9OVuSipDb9Mdf0JExNsGIUJ8AcAHqJ4olUm825XxtFRVLfHw6XXpWGNT
        J6gh612N+yUwdW5g11ysl2msb0aAdymlWmSiwt1eXQKBgQDW/6XGngb8Ch0P0TL3
        Hd4AB55eUfWEKR0+gYtqV3QX7ilXA3SjvkhtpsN42k4s1DNfw1ik589uIPgxbjHu
        IDccBh56ZhpR5PB5bc32L94zodwUY2gnYUlbxE/ayfZr1lngf2UI5ESURGBlxM77
        AaMoiTo507iY6h1ebbjkFgCLowKBgQC6P/Gg9IFcIdU87g8DGi/F+5MukTj8Dr8i
        eRRfEo2+5G1knxxIkez6xWmHItPWIK/U3uMp6eVnMu9+u/D4+1IwZ1Rk/Ovijrqs
        7Esu4O7C7Em25YrPM0N1KbDMcvkuRRXahHav4I3XrkWjGvtEcU4Hq77u6X07tcHE
        FpQMq2GCBwKBgQCIlUwZS5cgUsR3oe0AtEauOijPvr18QipD5UROQFSOR0yX7KgS
        xfV5Q3H2uqjjLcOdWJpd2K4cRnGl5V1u66RW90Qxed/KmuhyG+G2Pl6o6nDHuwcV
        zWYvGB2q3pbflwLt7cCfz3QJxQ6AWHEtYLLoM5V72xbwffo+XPISZC/ghQKBgGiX
        6FX/eXYH+fxRpFSVrCZ+9VS9cUb78RKm9G2/uaJuHZDYWcXXTUI3AuBFCrnBeX0N
        /nxXQeEGlcCSQu1QFgPgw2BDOSTuCp95w278GpmUoID5v05E96kgVI08M/tsCK3C
        nfR/Iqjw0WKbkGgLSUq9hGge75lMpRg9pb7Hr+aZAoGAW+Ln6Xle7+0XWIJA4tCc
        bzSjp7AcNYy1FNXlbyq5fxx0T/5HzGmg8FA3R7yA8T5mevyzgBuMblrbBIf8OhvG
        Wv2ZuaA4cBUcM+jQ3Xu/UWE1d5QJBMm8IHuWCP9fNIm+Ueh4V3TvK3/B/V00Vole
        ig7T80+wa9rsU4Y3xC0TJKQ=
        -----END PRIVATE KEY-----
        """

    /// The same key in the traditional PKCS#1 form.
    static let traditionalPEM = """
        -----BEGIN RSA PRIVATE KEY-----
        MIIEowIBAAKCAQEAnGtySfLh2/LYj5p8eu1KLEFikA5fqBohug5yuQ0DxCbHecPI
        L3GRgp8OxAxDrZwWBq4AB8MT/FxeuaSxuctbeqkodrYqBvSSLYKHDghXCc323+/Q
        LDUEO8lrPwVuBuWBkM/oW3t+IwaskLVNoxt49BhwKgQlCaAQ6NIAHRId9ZsgeVN8
        JTWacau5iD9Z4QHOS8jSYJbuRQKJPT19NdhFNHdfCzwevFGU9AzexuSTQ2NyCd7Q
        xESP12uDrmGKYIL8haJO4Gg7pOncuhx5pvcaladp8YMTLu15BDWydol79xhKYl+h
        eJzo53mKRnmRihgrHN3g+yV0vhXaxVyHqq+XdQIDAQABAoIBADaQMHzlMa405yAo
        xpVm4sHPSR9xNCMCgpNRaOluRcsNr/Wkutb56cVD0LXIhW8xDGnmFnKetQEKA60E
        a06hRlbiXRAT+VMVy0v+xTe65wmvhBeXoulY0RI976A7N6dGNc0bCTWoPVbghB+y
        btOfyLB1OeMeMQFLibp9TrbVVAgROens1sxXjc+en/j4kX7xKVaRFhdp70G89rxO
        IKLROQ4Be18OoPcfWNVI3YFJ0mbfywu0zAAd7PTlbkoqQ2/THX9CRMTbBiFCfAHA
        B6ieKJVJvNuV8bRUVS3x8Ol16VhjUyeoIetdjfslMHVuYNdcrJdprG9GgHcppVpk
        osLdXl0CgYEA1v+lxp4G/AodD9Ey9x3eAAeeXlH1hCkdPoGLald0F+4pVwN0o75I
        babDeNpOLNQzX8NYpOfPbiD4MW4x7iA3HAYeemYaUeTweW3N9i/eM6HcFGNoJ2FJ
        W8RP2sn2a9ZZ4H9lCORElERgZcTO+wGjKIk6OdO4mOodXm245BYAi6MCgYEAuj/x
        oPSBXCHVPO4PAxovxfuTLpE4/A6/InkUXxKNvuRtZJ8cSJHs+sVphyLT1iCv1N7j
        KenlZzLvfrvw+PtSMGdUZPzr4o66rOxLLuDuwuxJtuWKzzNDdSmwzHL5LkUV2oR2
        r+CN165Foxr7RHFOB6u+7ul9O7XBxBaUDKthggcCgYEAiJVMGUuXIFLEd6HtALRG
        rjooz769fEIqQ+VETkBUjkdMl+yoEsX1eUNx9rqo4y3DnViaXdiuHEZxpeVdbuuk
        VvdEMXnfyprochvhtj5eqOpwx7sHFc1mLxgdqt6W35cC7e3An890CcUOgFhxLWCy
        6DOVe9sW8H36PlzyEmQv4IUCgYBol+hV/3l2B/n8UaRUlawmfvVUvXFG+/ESpvRt
        v7mibh2Q2FnF101CNwLgRQq5wXl9Df58V0HhBpXAkkLtUBYD4MNgQzkk7gqfecNu
        /BqZlKCA+b9ORPepIFSNPDP7bAitwp30fyKo8NFim5BoC0lKvYRoHu+ZTKUYPaW+
        x6/mmQKBgFvi5+l5Xu/tF1iCQOLQnG80o6ewHDWMtRTV5W8quX8cdE/+R8xpoPBQ
        N0e8gPE+Znr8s4AbjG5a2wSH/Dobxlr9mbmgOHAVHDPo0N17v1FhNXeUCQTJvCB7
        lgj/XzSJvlHoeFd07yt/wf1dNFaJXooO0/NPsGva7FOGN8QtEySk
        -----END RSA PRIVATE KEY-----
        """

    /// A JWT-shaped signing input (the base64url header and claims of an assertion).
    static let message = "eyJhbGciOiJSUzI1NiIsInR5cCI6IkpXVCJ9.eyJpc3MiOiJ3YWxsZXRAZXhhbXBsZS5pYW0uZ3NlcnZpY2VhY2NvdW50LmNvbSJ9"

    /// `openssl dgst -sha256 -sign` over `message` with the 2048-bit key.
    static let signatureBase64 = [
            "dvmvVAZjKEFOmGSiKrNJZp3rRHp5d+rDmqP5bpSMk4x1iBGkJ6YF1Ek+Q9hw7zf7k1nDOoAGdS2s",
            "XVzKAZKWzJNy2E2QzPr5Aiw4ib3M7MCC/6Fb2A1UO4SYoUKfOisjktMs2NvX2TQ0xntbsQP5NPO7",
            "xHWgkIMhSK0TtXj8IJucQG2TMSHy2jTkF9/zwmD6Vt9sn8S1RqEacxAVzAqcw/vyVMHVNgqM2uPx",
            "nvV3b5dZio+2C2TYN9eZhxdrxAcePmaK1ijPxmSLlnpWn6KrlBx2vuF1Xig42mvDjdcjnChuto8y",
            "OogxPf/jw8s7uNB58+Ts1SASVw8WXdXSWVyVQw==",
    ].joined()

    /// The key's modulus as a JWK `n`, from `openssl rsa -modulus`.
    static let modulusBase64URL = [
            "nGtySfLh2_LYj5p8eu1KLEFikA5fqBohug5yuQ0DxCbHecPIL3GRgp8OxAxDrZwWBq4AB8MT_Fxe",
            "uaSxuctbeqkodrYqBvSSLYKHDghXCc323-_QLDUEO8lrPwVuBuWBkM_oW3t-IwaskLVNoxt49Bhw",
            "KgQlCaAQ6NIAHRId9ZsgeVN8JTWacau5iD9Z4QHOS8jSYJbuRQKJPT19NdhFNHdfCzwevFGU9Aze",
            "xuSTQ2NyCd7QxESP12uDrmGKYIL8haJO4Gg7pOncuhx5pvcaladp8YMTLu15BDWydol79xhKYl-h",
            "eJzo53mKRnmRihgrHN3g-yV0vhXaxVyHqq-XdQ",
    ].joined()

    /// A 1024-bit RSA key, too small for RS256.
    static let smallPKCS8PEM = """
        -----BEGIN PRIVATE KEY-----
        MIICdgIBADANBgkqhkiG9w0BAQEFAASCAmAwggJcAgEAAoGBAKQxrR+3coAvGZiU
        JGeJwhXpiN3JPgREUjgFHpM32mSK+lwjc8BagvRTjSG1ttZ5rIzsimNY+TnSUC9X
        Z3EGzavHYLzEFYRm2P37FWtRa3B4BwYk8njRAAALhgj3uzV5kTx8lDixlne6CW2u
        I4lFd2yYhmi5QEH07Fwti88ZwYE7AgMBAAECgYBIL+LqV8/KVWrObwsWTjV7RsI6
        p/hRDeyL3oxTszGcFJH/okKIpgJ/AqDA2lA5OSNIjdJF3V8tMa65MZcz1Qbks4X/
        31xpNf7hqyDcBy/rpyUM4zXsZRM7hPjaN8p1zwc3Nn093EmXiJKFSGUxBgdATehV
        ifTaVvlnmjvbaGYe2QJBANV+ogl17iZNTKLSoNoo6l1Q6iV6LAazurweo2RAtBQP
        9gEhDbJ9EJdfAm0aiV/Ye5tZb135jLEUc/APCN8/iqUCQQDE4kveOPqxK2kKH2Ic
        z+/ejfMN2OrqF2H2S00VafKV5E3VKA1VhLdNXa56T87wd4Ql1gpZyfh7DCLiMzg4
        IXZfAkBMcX0/efR9zmvEWTqzIrdYFmLgbHBbLfuM5EOI4AoarORe3yDyagmIycIq
        orfRk8gehdV0hqgzt6kTqa55kVzpAkEAn8VAagp1Ldcbe3JyTQ1VC5bH2cHhCKyG
        +7apzCnZCVhm7QZ+o5p6odbXIzymoy9p1sZ2Sd0Dvt7fZA7KnYpSIwJASWg1e+6t
        YaNfrTGc5mfjQotJMfi5yjS1ZXvoLvHKAb/TY4ZvxqBL/xAfLycEnoLCYlBUHW/s
        coADlrJhmWfr4A==
        -----END PRIVATE KEY-----
        """

    /// A P-256 key encrypted with the passphrase `secret`.
    static let encryptedPEM = """
        -----BEGIN ENCRYPTED PRIVATE KEY-----
        MIHsMFcGCSqGSIb3DQEFDTBKMCkGCSqGSIb3DQEFDDAcBAiUsHvFGk3z2gICCAAw
        DAYIKoZIhvcNAgkFADAdBglghkgBZQMEASoEELtk1XbbmEDT50IjtZiuIWoEgZCD
        kujzTqtP7hiMHg2P3T8S4Dk6H8TR4v8WqmWKG1QiLKlOY1W8OU3BVWBrMcJ9dara
        2mNk1t/3Jqmb6v7da5rrLe9x/UmWSF6V0umh8TdiOo6ULqmcCbFa1Bm2JPS82im7
        Fqro0s5ZPQUYvQWzscsj1w/Wk/ZXjGIgSwrZq6ZwV6tj3jcBF0wAHCB0MGpYpNI=
        -----END ENCRYPTED PRIVATE KEY-----
        """

    /// A 2048-bit RSA-PSS key: RSA numbers, but restricted to PSS signatures.
    static let pssPKCS8PEM = """
        -----BEGIN PRIVATE KEY-----
        MIIEuwIBADALBgkqhkiG9w0BAQoEggSnMIIEowIBAAKCAQEApBrBfMB5l3mxjE0W
        7ByyHOZWY8whHT0zocoNbxC3IxvIamMYGw1QgfpCyPzxYgJOkx73alI+0UW9AXn6
        j0WMxTCm4yXj1snhy4OTGXY8FX5cVcm/kUgJb7SzkeqNv20ByO2D1YMZy0ftTRD9
        LFGyILvSC+GDyrUysg3+lcilQa0QTjMa02Wdwkjrj0JQLywPKEaeDSaAQz/z7LkF
        ovLpf8pOetK40N4p6UTGq0fE550/P7+sAXgnQ2jWRBvV2RrViYSDf+8jo6/4lKGM
        P4lboCPsqYt18irnrLvDSJhmUSIbzf+b88UVqBvjssGzXrD/iYCJd8TN7hIZyrgM
        +ZPfvwIDAQABAoIBAB4DTrPUN+i+Nvyj9LdGIEUs00v5P20rjk/etkpD0lq3cBYU
        /YmlC75Z2PENYdA8/8XkefeWBysbCBBHEM43OCGwXjVY7qyPy53++F5Fw4Ni0txV
        w5V8iU1GzTi4nygNdbAb0GqySXtmMj5QBx2d62gVMbs+iW3/acAq0w7t3Vt/UmwF
        hjxsU/QCUqP7aLucN080Sl3fxYdcKWqbW2MJczCrqJzTZmRfakp0d05d9EXKthvF
        fZHPzrfbwsqk63maqkjEjdlFZyenWNUQVldak9r55QON5QdUNlQMlBVuUyOOfWvw
        R24SNq6jmbq6ynV1VI2/FFtaqPIF/yPuBWu5WgECgYEAzxPjKACtKwtaFfbLVka1
        VcTgubZ/epE33ifiQ01pzBnEyg8UBJHdV/XZxKFhV/RbGIlClUdJCzt2hGk8rHg6
        iH+nJkEutwob6iJgUK0E5XA0XsMBcdAmOFA/L6XZILxdtdm3DY6pTlZci6BZahkZ
        Wk9z0eXgoAgHAuUd4Q+a3T8CgYEAyt/XAzo15f/NKO3PruBI3qZCBO17QCZwzy9Q
        i0OemKz/jWGJEaEVm9/hYWgmBEzbSsFY4RcbEGtWbu+uSpnFhSMtfLsdiX8VWVHO
        2cIVgEci22ZptcPCWoVN4n19WRrnqUQrb+NM+M8+E3ZPZltBDw4lGyH+vhhM7vVh
        7YK13YECgYAwqASc9qO51H4DYSzgBdc/4vXGzUng29Rbv9VbaQot6fQiYi6a8Ecp
        DtxvZlgAGat59W6OsuRH3l33uN6Hy+w8/Hmi9HfsjFSIzDEDY9QdsSKtDXb+biE8
        5CYkpPyCw5/lRdXMOrQvcv1l1XSNCH67iKW3MSN5lslG9dzyb/88cwKBgAmCdJGy
        KNSfKP7CJvoLiV7mbDHO7/gR1Tfg/+WHRefiNBhsegBZjKnB1M68Ewwgjiby6Tej
        3aDnZyXMFl9o1dlnzLoMC1ZmnpmRPCD4+AkLTJb8NfhPNM0Jcp0rRLTojfNhPqf/
        /5uqGz7OTOp/XI1YHGUpMse2W+TXm7+GYQABAoGBALN/3Ot503lUTYR3mOXcKjaI
        AyLDi7R2gogoJVy/GsKYQpPWbL4sXsvC9zFYR5IIpedwUIE08IRV7kRcC3YreNXt
        0BY+iD+tQ7zsvM5hbXX1MUpZvnV0xi9C42qr5PNqBrFA/+CA58d0O5ywrKWKD0jG
        ytaB5RQpiQYhArU+zv6p
        -----END PRIVATE KEY-----
        """
}
