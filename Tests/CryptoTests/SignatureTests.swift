import Crypto
import CryptoTestSupport
import Testing

@Suite struct SignatureTests {
    let message = Array("header.payload".utf8)

    @Test(.timeLimit(.minutes(1)))
    func rawSignatureRoundTrip() {
        let key = PrivateKey()
        #expect(key.publicKey.isP256)
        let signature = key.sign(message)
        #expect(signature.count == 64)
        #expect(key.publicKey.verifyES256(rawSignature: signature, message: message))
        #expect(key.publicKey.verifyES256(rawSignature: signature, message: "header.payload".utf8))
    }

    @Test(.timeLimit(.minutes(1)))
    func derSignatureIsRejected() {
        let key = PrivateKey()
        let der = key.signDER(message)
        // The DER form is valid ECDSA, but ES256 in JOSE is r‖s only.
        #expect(der.first == 0x30)
        #expect(!key.publicKey.verifyES256(rawSignature: der, message: message))
    }

    @Test(.timeLimit(.minutes(1)))
    func wrongKeyMessageOrLengthIsRejected() {
        let key = PrivateKey()
        let other = PrivateKey()
        let signature = key.sign(message)
        #expect(!other.publicKey.verifyES256(rawSignature: signature, message: message))
        #expect(!key.publicKey.verifyES256(rawSignature: signature, message: Array("header.payloaD".utf8)))
        #expect(!key.publicKey.verifyES256(rawSignature: Array(signature.dropLast()), message: message))
        #expect(!key.publicKey.verifyES256(rawSignature: signature + [0], message: message))
        #expect(!key.publicKey.verifyES256(rawSignature: [], message: message))
        #expect(!key.publicKey.verifyES256(rawSignature: [UInt8](repeating: 0, count: 64), message: message))
        var flipped = signature
        flipped[10] ^= 0x01
        #expect(!key.publicKey.verifyES256(rawSignature: flipped, message: message))
    }

    @Test(.timeLimit(.minutes(1)))
    func publicKeyEncodesAsSubjectPublicKeyInfo() {
        let spki = PrivateKey().publicKey.subjectPublicKeyInfoDER
        // SEQUENCE { SEQUENCE { ecPublicKey, prime256v1 }, BIT STRING (65-byte point) }
        #expect(spki.count == 91)
        #expect(spki.first == 0x30)
    }
}
