import AppStore
import Crypto
import CryptoTestSupport
import Foundation
import TestSupport
import Testing

/// A scratch directory removed when the value goes away.
final class ScratchDirectory {
    let url: URL

    init() throws {
        url = FileManager.default.temporaryDirectory
            .appendingPathComponent("appstore-tests-\(hexString(SecureRandom.bytes(count: 8)))")
        try FileManager.default.createDirectory(at: url, withIntermediateDirectories: false)
    }

    deinit {
        try? FileManager.default.removeItem(at: url)
    }

    func write(_ name: String, _ bytes: [UInt8]) throws -> String {
        let file = url.appendingPathComponent(name)
        try Data(bytes).write(to: file)
        return file.path
    }
}

func pem(_ certificates: [Certificate]) -> String {
    certificates.map { certificate in
        let body = Base64.encode(certificate.derBytes)
        var lines: [Substring] = []
        var rest = body[...]
        while !rest.isEmpty {
            lines.append(rest.prefix(64))
            rest = rest.dropFirst(64)
        }
        return "-----BEGIN CERTIFICATE-----\n" + lines.joined(separator: "\n") + "\n-----END CERTIFICATE-----\n"
    }.joined()
}

@Suite struct VerifyCommandTests {
    let store: FakeAppStore
    let scratch: ScratchDirectory
    let rootPath: String
    let now = FakeAppStore.signedDate.addingTimeInterval(5)

    init() throws {
        store = try FakeAppStore()
        scratch = try ScratchDirectory()
        rootPath = try scratch.write("root.pem", Array(pem([store.root.certificate]).utf8))
    }

    func run(_ arguments: [String], _ input: String) -> (exitCode: Int32, stdout: String, stderr: String) {
        let now = self.now
        return VerifyCommand.run(arguments: arguments, stdin: Data(input.utf8), clock: { now })
    }

    @Test(.timeLimit(.minutes(1)))
    func validTransactionPrintsItsPayload() throws {
        let jws = store.sign(FakeAppStore.transaction())
        let result = run(["--bundle-id", FakeAppStore.bundleID, "--environment", "Sandbox", "--root", rootPath], jws + "\n")
        #expect(result.exitCode == 0)
        #expect(result.stderr.isEmpty)
        let printed = try #require(try JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [String: Any])
        #expect(printed["transactionId"] as? String == "2000000000000001")
        #expect((printed["price"] as? NSNumber)?.int64Value == 4990)
        #expect(result.stdout.hasSuffix("}\n"))
        // For people: a member a line, indented, `"key" : value`, keys sorted.
        #expect(result.stdout.contains("\n  \"transactionId\" : \"2000000000000001\""))
        let keys = result.stdout.split(separator: "\n").filter { $0.hasPrefix("  \"") }
            .map { String($0.dropFirst(3).prefix { $0 != "\"" }) }
        #expect(keys.count == printed.count)
        #expect(keys == keys.sorted())
    }

    @Test(.timeLimit(.minutes(1)))
    func notificationPrintsNestedTokensDecoded() throws {
        let notification = store.sign(FakeAppStore.notification(
            signedTransactionInfo: store.sign(FakeAppStore.transaction()),
            signedRenewalInfo: store.sign(FakeAppStore.renewalInfo())
        ))
        let result = run(["--bundle-id", FakeAppStore.bundleID, "--environment", "Sandbox", "--root", rootPath], notification)
        #expect(result.exitCode == 0, "\(result.stderr)")
        let printed = try #require(try JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [String: Any])
        let data = try #require(printed["data"] as? [String: Any])
        let transaction = try #require(data["signedTransactionInfo"] as? [String: Any])
        #expect(transaction["productId"] as? String == "coins.1000")
        let renewal = try #require(data["signedRenewalInfo"] as? [String: Any])
        #expect(renewal["autoRenewProductId"] as? String == "pass.monthly")
    }

    @Test(.timeLimit(.minutes(1)))
    func invalidTokenPrintsTheReason() {
        let jws = store.sign(FakeAppStore.transaction(bundleID: "com.example.other"))
        let result = run(["--bundle-id", FakeAppStore.bundleID, "--environment", "Sandbox", "--root", rootPath], jws)
        #expect(result.exitCode == 1)
        #expect(result.stdout.isEmpty)
        #expect(result.stderr == "invalid: bundle_mismatch: bundleId is not one of the configured bundle IDs\n")

        let garbage = run(["--bundle-id", FakeAppStore.bundleID], "not a token")
        #expect(garbage.exitCode == 1)
        #expect(garbage.stderr.hasPrefix("invalid: malformed: "))

        let empty = run(["--bundle-id", FakeAppStore.bundleID], "")
        #expect(empty.exitCode == 1)
        #expect(empty.stderr.hasPrefix("invalid: malformed: "))
    }

    @Test(.timeLimit(.minutes(1)))
    func defaultsAreTheAppleRootAndProduction() {
        // Without --root the fake chain is untrusted…
        let jws = store.sign(FakeAppStore.transaction())
        let untrusted = run(["--bundle-id", FakeAppStore.bundleID, "--environment", "Sandbox"], jws)
        #expect(untrusted.stderr.hasPrefix("invalid: untrusted_root: "))
        // …and without --environment only Production is allowed.
        let sandbox = run(["--bundle-id", FakeAppStore.bundleID, "--root", rootPath], jws)
        #expect(sandbox.stderr.hasPrefix("invalid: environment_not_allowed: "))
        let production = store.sign(FakeAppStore.transaction(environment: "Production"))
        #expect(run(["--bundle-id", FakeAppStore.bundleID, "--root", rootPath], production).exitCode == 0)
    }

    @Test(.timeLimit(.minutes(1)))
    func productionNotificationNeedsAppAppleID() {
        let jws = store.sign(FakeAppStore.notification(environment: "Production"))
        let base = ["--bundle-id", FakeAppStore.bundleID, "--root", rootPath]
        #expect(run(base, jws).stderr.hasPrefix("invalid: bundle_mismatch: "))
        #expect(run(base + ["--app-apple-id", String(FakeAppStore.appAppleID)], jws).exitCode == 0)
        #expect(run(base + ["--app-apple-id", "99"], jws).exitCode == 1)
    }

    @Test(.timeLimit(.minutes(1)))
    func usageErrors() {
        let jws = store.sign(FakeAppStore.transaction())
        let cases: [([String], String)] = [
            ([], "at least one --bundle-id is required"),
            (["--environment", "Sandbox"], "at least one --bundle-id is required"),
            (["--bundle-id"], "--bundle-id needs a value"),
            (["--bundle-id", ""], "--bundle-id needs a value"),
            (["--bundle-id", "a", "--any-bundle"], "unknown argument --any-bundle"),
            (["--bundle-id", "a", "--environment", "Xcode"], "never accepted"),
            (["--bundle-id", "a", "--environment", "LocalTesting"], "never accepted"),
            (["--bundle-id", "a", "--environment", "production"], "must be Production or Sandbox"),
            (["--bundle-id", "a", "--app-apple-id", "x"], "positive integer"),
            (["--bundle-id", "a", "--app-apple-id", "-5"], "positive integer"),
            (["--bundle-id", "a", "--app-apple-id", "1", "--app-apple-id", "2"], "given twice"),
            (["--bundle-id", "a", "--root", "/nonexistent/root.pem"], "cannot read the file"),
        ]
        for (arguments, message) in cases {
            let result = run(arguments, jws)
            #expect(result.exitCode == 2, "\(arguments)")
            #expect(result.stdout.isEmpty)
            #expect(result.stderr.contains(message), "\(arguments): \(result.stderr)")
            #expect(result.stderr.contains("usage: wallet appstore verify") || arguments.contains("--root"))
        }
        let help = run(["--help"], "")
        #expect(help.exitCode == 0)
        #expect(help.stdout == VerifyCommand.usage)
    }
}

@Suite struct RootCertificateLoadingTests {
    @Test(.timeLimit(.minutes(1)))
    func loadsPEMBundlesAndDERFiles() throws {
        let first = try FakeAppStore()
        let second = try FakeAppStore()
        let scratch = try ScratchDirectory()
        let bundle = try scratch.write("bundle.pem", Array(pem([first.root.certificate, second.root.certificate]).utf8))
        let der = try scratch.write("root.der", second.intermediate.certificate.derBytes)

        let loaded = try VerifierConfiguration.loadRootCertificates(commaSeparatedPaths: "\(bundle), \(der)")
        #expect(loaded.map(\.derBytes) == [
            first.root.certificate.derBytes, second.root.certificate.derBytes, second.intermediate.certificate.derBytes,
        ])
    }

    @Test(.timeLimit(.minutes(1)))
    func refusesUnusableFiles() throws {
        let store = try FakeAppStore()
        let scratch = try ScratchDirectory()
        let leaf = try scratch.write("leaf.der", store.leaf.derBytes)
        let text = try scratch.write("notes.txt", Array("hello".utf8))
        let truncated = try scratch.write("cut.der", Array(store.root.certificate.derBytes.dropLast()))
        let good = try scratch.write("root.pem", Array(pem([store.root.certificate]).utf8))

        func message(_ list: String) -> String? {
            do {
                _ = try VerifierConfiguration.loadRootCertificates(commaSeparatedPaths: list)
                return nil
            } catch {
                return error.description
            }
        }
        #expect(message(leaf)?.contains("is not a CA certificate") == true)
        #expect(message(text)?.contains("not a PEM file of certificates") == true)
        #expect(message(truncated)?.contains("not a DER certificate") == true)
        #expect(message("\(good),")?.contains("empty path") == true)
        #expect(message("/nonexistent.pem")?.contains("cannot read the file") == true)
        #expect(message(good) == nil)
        #expect(throws: RootCertificateLoadError.self) { try VerifierConfiguration.loadRootCertificates(paths: []) }
    }
}
