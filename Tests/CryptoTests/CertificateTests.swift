import Crypto
import CryptoTestSupport
import Foundation
import Testing

/// A root → intermediate → leaf chain made in-process, valid for one year
/// from `start`.
struct TestChain {
    static let start = Date(timeIntervalSince1970: 1_700_000_000)  // 2023-11-14
    static let end = start.addingTimeInterval(365 * 86_400)
    static let midway = start.addingTimeInterval(180 * 86_400)

    let root: CertificateAuthority
    let intermediate: CertificateAuthority
    let leafKey: PrivateKey
    let leaf: Certificate

    init(
        rootName: String = "Test Root",
        leafExtensions: [CertificateExtension] = [],
        keyIdentifiers: Bool = true,
        leafNotAfter: Date = TestChain.end
    ) throws {
        root = try CertificateAuthority.root(
            profile(rootName, serial: 1, keyIdentifiers: keyIdentifiers)
        )
        intermediate = try root.intermediate(
            profile("Test Intermediate", serial: 2, keyIdentifiers: keyIdentifiers)
        )
        leafKey = PrivateKey()
        var leafProfile = profile("Test Leaf", serial: 3, keyIdentifiers: keyIdentifiers)
        leafProfile.notAfter = leafNotAfter
        leafProfile.extraExtensions = leafExtensions
        leaf = try intermediate.leaf(leafProfile, subjectKey: leafKey.publicKey)
    }
}

func profile(_ name: String, serial: UInt64, keyIdentifiers: Bool = true) -> CertificateProfile {
    CertificateProfile(
        commonName: name, organization: "Example Games", serialNumber: serial,
        notBefore: TestChain.start, notAfter: TestChain.end, includesKeyIdentifiers: keyIdentifiers
    )
}

/// PEM text for DER bytes, 64 characters a line.
func pem(_ der: [UInt8]) -> String {
    let body = Base64.encode(der)
    var lines: [Substring] = []
    var rest = body[...]
    while !rest.isEmpty {
        lines.append(rest.prefix(64))
        rest = rest.dropFirst(64)
    }
    return "-----BEGIN CERTIFICATE-----\n" + lines.joined(separator: "\n") + "\n-----END CERTIFICATE-----\n"
}

@Suite struct CertificateTests {
    @Test(.timeLimit(.minutes(1)))
    func issuedCertificatesCarryTheirProfile() throws {
        let marker = "1.3.6.1.4.1.55555.1.1"
        let chain = try TestChain(leafExtensions: [.marker(oid: marker)])
        #expect(chain.root.certificate.isCA)
        #expect(chain.intermediate.certificate.isCA)
        #expect(!chain.leaf.isCA)
        #expect(chain.leaf.subjectSummary == "CN=Test Leaf,O=Example Games")
        #expect(chain.leaf.notBefore == TestChain.start)
        #expect(chain.leaf.notAfter == TestChain.end)
        #expect(chain.leaf.publicKey.isP256)
        #expect(chain.leaf.publicKey.subjectPublicKeyInfoDER == chain.leafKey.publicKey.subjectPublicKeyInfoDER)
        #expect(chain.leaf.hasExtension(oid: marker))
        #expect(chain.leaf.hasExtension(oid: "2.5.29.35"))  // authority key identifier
        #expect(chain.leaf.hasExtension(oid: "2.5.29.14"))  // subject key identifier
        #expect(!chain.intermediate.certificate.hasExtension(oid: marker))
        #expect(!chain.root.certificate.hasExtension(oid: "2.5.29.35"))
        #expect(!chain.leaf.hasExtension(oid: "not an oid"))
    }

    @Test(.timeLimit(.minutes(1)))
    func derAndPEMRoundTrip() throws {
        let chain = try TestChain()
        let der = chain.leaf.derBytes
        let reparsed = try Certificate(der: der)
        #expect(reparsed.derBytes == der)
        #expect(reparsed.isSameCertificate(as: chain.leaf))
        #expect(try Certificate(pem: pem(der)).derBytes == der)

        let bundle = Certificate.pemBundle(pem(chain.root.certificate.derBytes) + "\n" + pem(der))
        #expect(bundle.map(\.derBytes) == [chain.root.certificate.derBytes, der])
    }

    @Test(.timeLimit(.minutes(1)))
    func malformedInputIsRejected() throws {
        let der = try TestChain().leaf.derBytes
        #expect(throws: CertificateError.self) { try Certificate(der: [UInt8]()) }
        #expect(throws: CertificateError.self) { try Certificate(der: Array(der.dropLast())) }
        #expect(throws: CertificateError.self) { try Certificate(der: der + [0]) }
        #expect(throws: CertificateError.self) { try Certificate(der: Array("not a certificate".utf8)) }
        #expect(throws: CertificateError.self) { try Certificate(pem: "") }
        // Two certificates where one is expected.
        #expect(throws: CertificateError.self) { try Certificate(pem: pem(der) + pem(der)) }

        // A corrupt block poisons the whole bundle, whether the extra bytes
        // break the base64 or decode to trailing bytes after the DER.
        for garbage in ["AAAA", "AAA", "!"] {
            let corrupt = pem(der).replacingOccurrences(of: "\n-----END", with: "\n\(garbage)\n-----END")
            #expect(Certificate.pemBundle(pem(der) + corrupt).isEmpty, "\(garbage)")
        }
        let trailing = pem(der + [0, 0, 0])
        #expect(Certificate.pemBundle(trailing).isEmpty)
        #expect(Certificate.pemBundle("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n").isEmpty)
        #expect(Certificate.pemBundle(pem(der) + "-----BEGIN CERTIFICATE-----\n").isEmpty)
        #expect(Certificate.pemBundle("nothing here").isEmpty)
        // Comments outside blocks and CRLF line ends are fine.
        let commented = "subject=CN=Test Leaf\r\n" + pem(der).replacingOccurrences(of: "\n", with: "\r\n")
        #expect(Certificate.pemBundle(commented).map(\.derBytes) == [der])
    }
}

@Suite struct ChainTests {
    @Test(.timeLimit(.minutes(1)))
    func validChainIsAcceptedAndReturnsThePath() throws {
        let chain = try TestChain()
        let path = try verifyChain(
            leaf: chain.leaf, intermediates: [chain.intermediate.certificate],
            trustedRoots: [chain.root.certificate], at: TestChain.midway
        )
        #expect(path.count == 3)
        #expect(path[0] === chain.leaf)
        #expect(path[1] === chain.intermediate.certificate)
        #expect(path[2] === chain.root.certificate)
    }

    @Test(.timeLimit(.minutes(1)))
    func repeatedAndUnrelatedRootsAreHarmless() throws {
        let chain = try TestChain()
        let other = try TestChain()
        let path = try verifyChain(
            leaf: chain.leaf, intermediates: [chain.intermediate.certificate],
            trustedRoots: [other.root.certificate, chain.root.certificate, chain.root.certificate],
            at: TestChain.midway
        )
        #expect(path.last === chain.root.certificate)
    }

    @Test(.timeLimit(.minutes(1)))
    func validityWindowIsEnforcedAtTheGivenTime() throws {
        let chain = try TestChain(leafNotAfter: TestChain.midway)
        let verify = { (time: Date) throws(ChainError) in
            _ = try verifyChain(
                leaf: chain.leaf, intermediates: [chain.intermediate.certificate],
                trustedRoots: [chain.root.certificate], at: time
            )
        }
        try verify(TestChain.midway.addingTimeInterval(-1))
        let expired = #expect(throws: ChainError.self) { try verify(TestChain.midway.addingTimeInterval(2)) }
        #expect(expired?.kind == .invalid(.expired))
        #expect(expired?.depth == 0)
        let early = #expect(throws: ChainError.self) { try verify(TestChain.start.addingTimeInterval(-60)) }
        #expect(early?.kind == .invalid(.notYetValid))
    }

    @Test(.timeLimit(.minutes(1)))
    func otherRootIsUntrusted() throws {
        let chain = try TestChain()
        let stranger = try TestChain(rootName: "Test Root")  // same name, different key
        let error = #expect(throws: ChainError.self) {
            try verifyChain(
                leaf: chain.leaf, intermediates: [chain.intermediate.certificate],
                trustedRoots: [stranger.root.certificate], at: TestChain.midway
            )
        }
        #expect(error?.kind == .untrustedRoot)
        #expect(error?.depth == 1)
        #expect(error?.description.contains("OpenSSL") == false)
        #expect(error?.debugDescription.contains("OpenSSL verify error") == true)

        let noRoots = #expect(throws: ChainError.self) {
            try verifyChain(
                leaf: chain.leaf, intermediates: [chain.intermediate.certificate],
                trustedRoots: [], at: TestChain.midway
            )
        }
        #expect(noRoots?.kind == .untrustedRoot)
    }

    @Test(.timeLimit(.minutes(1)))
    func intermediateIsNeverATrustAnchor() throws {
        let chain = try TestChain()
        // Trusting the intermediate alone would be a partial chain.
        let error = #expect(throws: ChainError.self) {
            try verifyChain(
                leaf: chain.leaf, intermediates: [],
                trustedRoots: [chain.intermediate.certificate], at: TestChain.midway
            )
        }
        #expect(error?.kind == .untrustedRoot)
        // A root smuggled in among the intermediates is not trusted either.
        let smuggled = #expect(throws: ChainError.self) {
            try verifyChain(
                leaf: chain.leaf, intermediates: [chain.intermediate.certificate, chain.root.certificate],
                trustedRoots: [], at: TestChain.midway
            )
        }
        #expect(smuggled?.kind == .untrustedRoot)
    }

    @Test(.timeLimit(.minutes(1)))
    func wrongOrMissingIntermediateIsRejected() throws {
        let chain = try TestChain()
        let sibling = try chain.root.intermediate(profile("Test Intermediate", serial: 9))
        let wrong = #expect(throws: ChainError.self) {
            try verifyChain(
                leaf: chain.leaf, intermediates: [sibling.certificate],
                trustedRoots: [chain.root.certificate], at: TestChain.midway
            )
        }
        // Same issuer name, different key: the leaf's issuer is not found.
        #expect(wrong?.kind == .untrustedRoot)
        #expect(wrong?.depth == 0)
        let missing = #expect(throws: ChainError.self) {
            try verifyChain(
                leaf: chain.leaf, intermediates: [],
                trustedRoots: [chain.root.certificate], at: TestChain.midway
            )
        }
        #expect(missing?.kind == .untrustedRoot)
        #expect(missing?.depth == 0)
    }

    @Test(.timeLimit(.minutes(1)))
    func tamperedCertificateSignatureIsRejected() throws {
        let chain = try TestChain()
        var der = chain.leaf.derBytes
        // The last byte lies inside the ECDSA signature's S value.
        der[der.count - 1] ^= 0x01
        let tampered = try Certificate(der: der)
        let error = #expect(throws: ChainError.self) {
            try verifyChain(
                leaf: tampered, intermediates: [chain.intermediate.certificate],
                trustedRoots: [chain.root.certificate], at: TestChain.midway
            )
        }
        #expect(error?.kind == .invalid(.badSignature))
    }

    @Test(.timeLimit(.minutes(1)))
    func strictModeRequiresKeyIdentifiers() throws {
        let chain = try TestChain(keyIdentifiers: false)
        let error = #expect(throws: ChainError.self) {
            try verifyChain(
                leaf: chain.leaf, intermediates: [chain.intermediate.certificate],
                trustedRoots: [chain.root.certificate], at: TestChain.midway
            )
        }
        #expect(error?.kind == .invalid(.strictProfileViolation))
        // The same chain passes without strict mode, which shows what failed.
        try verifyChain(
            leaf: chain.leaf, intermediates: [chain.intermediate.certificate],
            trustedRoots: [chain.root.certificate], at: TestChain.midway, strict: false
        )
    }

    @Test(.timeLimit(.minutes(1)))
    func unknownCriticalExtensionIsRejected() throws {
        let chain = try TestChain(leafExtensions: [
            CertificateExtension(oid: "1.3.6.1.4.1.55555.9", isCritical: true, derValue: [0x05, 0x00]),
        ])
        let error = #expect(throws: ChainError.self) {
            try verifyChain(
                leaf: chain.leaf, intermediates: [chain.intermediate.certificate],
                trustedRoots: [chain.root.certificate], at: TestChain.midway
            )
        }
        #expect(error?.kind == .invalid(.unhandledCriticalExtension))
    }

    @Test(.timeLimit(.minutes(1)))
    func leafCannotIssue() throws {
        let chain = try TestChain()
        // Sign a certificate with the leaf's key and the leaf's name as issuer,
        // by making a throwaway CA that reuses them.
        let impostor = try CertificateAuthority.root(
            CertificateProfile(
                commonName: "Test Leaf", organization: "Example Games", serialNumber: 3,
                notBefore: TestChain.start, notAfter: TestChain.end
            ),
            key: chain.leafKey
        )
        let grandchild = try impostor.leaf(profile("Grandchild", serial: 4), subjectKey: PrivateKey().publicKey)
        let error = #expect(throws: ChainError.self) {
            try verifyChain(
                leaf: grandchild, intermediates: [chain.leaf, chain.intermediate.certificate],
                trustedRoots: [chain.root.certificate], at: TestChain.midway
            )
        }
        #expect(error?.kind == .invalid(.notCertificateAuthority))
        #expect(error?.depth == 1)
    }
}
