import AppStore
import Crypto
import CryptoTestSupport
import Foundation
import TestSupport
import Testing

/// Real App Store tokens (and a few known-bad ones) from
/// `Vectors/`, each checked at its own `signedDate` against the real
/// Apple Root CA - G3. See `Vectors/README.md` for where they come from.
@Suite struct AppleVectorTests {
    static let directory = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("Vectors")

    static let names: [String] = {
        let files = (try? FileManager.default.contentsOfDirectory(atPath: directory.path)) ?? []
        return files.filter { $0.hasSuffix(".json") }.sorted()
    }()

    /// The reason each invalid vector must be refused with.
    static let expectedFailures: [String: VerificationFailure] = [
        // Apple's own library test chain: everything passes but the root.
        "fake-wrong-root-1.json": .untrusted_root,
        "fake-wrong-root-2.json": .untrusted_root,
        // One self-signed certificate in x5c (and a fractional signedDate).
        "fake-xcode-1.json": .malformed,
        // Huawei's chain; it has `signedTime`, not `signedDate`.
        "fake-non-apple-chain-1.json": .malformed,
        // The chain is under a misspelled header key.
        "fake-missing-x5c-1.json": .malformed,
        // A real header and signature over a re-encoded payload.
        "fake-tampered-payload-1.json": .bad_signature,
    ]

    struct Vector {
        let jws: String
        let kind: String
        let isValid: Bool
        let signedDateMilliseconds: Int64?
        let environment: String?
        let decoded: [String: Any]

        init(named name: String) throws {
            let data = try Data(contentsOf: AppleVectorTests.directory.appendingPathComponent(name))
            let object = try #require(try JSONSerialization.jsonObject(with: data) as? [String: Any])
            jws = try #require(object["jws"] as? String)
            kind = try #require(object["kind"] as? String)
            isValid = (object["expected"] as? String) == "valid_at_signed_date"
            signedDateMilliseconds = (object["signed_date_ms"] as? NSNumber).map { Int64($0.doubleValue) }
            environment = object["environment"] as? String
            decoded = (object["decoded"] as? [String: Any]) ?? [:]
        }

        var data: [String: Any]? { decoded["data"] as? [String: Any] }
        var bundleID: String? { decoded["bundleId"] as? String ?? data?["bundleId"] as? String }
        var appAppleID: Int64? { (data?["appAppleId"] as? NSNumber)?.int64Value }
        var signedDate: Date {
            // Vectors without a signedDate are checked at a fixed time.
            Date(timeIntervalSince1970: Double(signedDateMilliseconds ?? 1_764_547_200_000) / 1000)
        }

        func verify(
            bundleIDs: Set<String>? = nil,
            environments: Set<Environment>? = nil,
            roots: [Certificate] = VerifierConfiguration.defaultRoots
        ) -> VerificationError? {
            let now = signedDate
            let configuration = VerifierConfiguration(
                rootCertificates: roots,
                bundleIDs: bundleIDs ?? Set([bundleID].compactMap { $0 }),
                environments: environments ?? Set([environment].compactMap { $0 }.map(Environment.init(rawValue:))),
                appAppleID: appAppleID,
                clock: { now }
            )
            let verifier = SignedDataVerifier(configuration: configuration)
            return verificationError {
                switch kind {
                case "notification": _ = try verifier.verifyNotification(jws)
                default: _ = try verifier.verifyTransaction(jws)
                }
            }
        }
    }

    @Test(.timeLimit(.minutes(1)))
    func everyVectorIsPresent() {
        #expect(Self.names.count == 18)
        for name in Self.expectedFailures.keys {
            #expect(Self.names.contains(name))
        }
    }

    @Test(.timeLimit(.minutes(1)))
    func shippedRootIsAppleRootCAG3() throws {
        let roots = VerifierConfiguration.defaultRoots
        try #require(roots.count == 1)
        #expect(SHA256.hex(roots[0].derBytes) == "63343abfb89a6a03ebb57e9b3f5fa7be7c4f5c756f3017b3a8c488c3653e9179")
        #expect(roots[0].subjectSummary == "C=US,O=Apple Inc.,OU=Apple Certification Authority,CN=Apple Root CA - G3")
        #expect(roots[0].isCA)
    }

    @Test(.timeLimit(.minutes(1)), arguments: AppleVectorTests.names)
    func vectorGetsItsVerdict(_ name: String) throws {
        let vector = try Vector(named: name)
        if vector.isValid {
            let error = vector.verify()
            #expect(error == nil, "\(name): \(error?.debugDescription ?? "")")
        } else {
            let expected = try #require(Self.expectedFailures[name], "no expected reason for \(name)")
            // Allowing every environment, even Xcode, changes nothing.
            let error = vector.verify(environments: [.production, .sandbox, .xcode, .localTesting])
            #expect(error?.reason == expected, "\(name): \(error?.debugDescription ?? "accepted")")
        }
    }

    /// Trusting the test root of Apple's own server library does not rescue
    /// its chain: those certificates lack the key identifiers, key usage and
    /// critical basicConstraints that X509 strict mode requires.
    @Test(.timeLimit(.minutes(1)), arguments: ["fake-wrong-root-1.json", "fake-wrong-root-2.json"])
    func appleLibraryTestChainFailsStrictMode(_ name: String) throws {
        let vector = try Vector(named: name)
        let headerSegment = try #require(vector.jws.split(separator: ".").first)
        let headerBytes = try #require(Base64URL.decode(String(headerSegment)))
        let header = try #require(try JSONSerialization.jsonObject(with: Data(headerBytes)) as? [String: Any])
        let chain = try #require(header["x5c"] as? [String])
        let testRoot = try Certificate(der: try #require(Base64.decode(chain[2])))
        let error = vector.verify(environments: [.sandbox], roots: [testRoot])
        #expect(error?.reason == .bad_chain)
        #expect(error?.detail == "x5c[0] (leaf) breaks the X.509 strict profile")
    }

    @Test(.timeLimit(.minutes(1)), arguments: AppleVectorTests.names)
    func validVectorsStillHonourTheConfiguration(_ name: String) throws {
        let vector = try Vector(named: name)
        guard vector.isValid else { return }
        #expect(vector.verify(bundleIDs: ["com.example.not-this-app"])?.reason == .bundle_mismatch)
        let otherEnvironment: Environment = vector.environment == "Production" ? .sandbox : .production
        #expect(vector.verify(environments: [otherEnvironment])?.reason == .environment_not_allowed)
        let fake = try FakeAppStore()
        #expect(vector.verify(roots: [fake.root.certificate])?.reason == .untrusted_root)
    }

    @Test(.timeLimit(.minutes(1)), arguments: AppleVectorTests.names)
    func commandPrintsTheDecodedPayload(_ name: String) throws {
        let vector = try Vector(named: name)
        let bundleID = vector.bundleID ?? "com.example.unknown"
        var arguments = ["--bundle-id", bundleID]
        if let environment = vector.environment, environment == "Production" || environment == "Sandbox" {
            arguments += ["--environment", environment]
        }
        if let appAppleID = vector.appAppleID {
            arguments += ["--app-apple-id", String(appAppleID)]
        }
        let now = vector.signedDate
        let result = VerifyCommand.run(arguments: arguments, stdin: Data((vector.jws + "\n").utf8), clock: { now })
        if vector.isValid {
            #expect(result.exitCode == 0, "\(name): \(result.stderr)")
            #expect(result.stderr.isEmpty)
            let printed = try JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? NSDictionary
            #expect(printed == vector.decoded as NSDictionary, "\(name)")
        } else {
            #expect(result.exitCode == 1, "\(name)")
            #expect(result.stdout.isEmpty)
            let expected = try #require(Self.expectedFailures[name])
            #expect(result.stderr.hasPrefix("invalid: \(expected.rawValue): "), "\(name): \(result.stderr)")
        }
    }
}
