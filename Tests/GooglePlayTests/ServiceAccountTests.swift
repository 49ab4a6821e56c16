import Crypto
import Foundation
import GooglePlay
import Testing
import TestSupport

@Suite(.timeLimit(.minutes(1)))
struct ServiceAccountTests {
    /// The fake's key file as an object to edit.
    private static func keyFile(_ fake: FakeGooglePlay) throws -> [String: Any] {
        try #require(try JSONSerialization.jsonObject(with: Data(fake.serviceAccountJSON().utf8)) as? [String: Any])
    }

    private static func bytes(_ object: [String: Any]) throws -> [UInt8] {
        Array(try JSONSerialization.data(withJSONObject: object))
    }

    /// The lines of a PEM's base64 body: none of them may show up in text.
    private static func secretLines(_ pem: String) -> [String] {
        pem.split(separator: "\n").map(String.init).filter { !$0.hasPrefix("-----") && $0.count >= 16 }
    }

    private static func loadError(_ bytes: [UInt8]) -> ServiceAccount.LoadError? {
        do {
            _ = try ServiceAccount(json: bytes)
            return nil
        } catch {
            return error
        }
    }

    @Test func aKeyFileAsGoogleIssuesItIsRead() throws {
        let fake = try FakeGooglePlay()
        defer { fake.stop() }
        let account = try ServiceAccount(json: Array(fake.serviceAccountJSON().utf8))
        #expect(account.clientEmail == "wallet@test-project.iam.gserviceaccount.com")
        #expect(account.privateKeyID == fake.privateKeyID)
        #expect(account.tokenURI == fake.account.tokenURI)
        #expect(account.privateKey.publicKey.rsaComponents?.modulus
            == fake.account.privateKey.publicKey.rsaComponents?.modulus)

        // Without a key id it is still usable.
        var file = try Self.keyFile(fake)
        file["private_key_id"] = nil
        #expect(try ServiceAccount(json: Self.bytes(file)).privateKeyID == nil)
    }

    @Test func aMissingFieldIsNamed() throws {
        let fake = try FakeGooglePlay()
        defer { fake.stop() }
        for name in ["client_email", "private_key", "token_uri"] {
            var file = try Self.keyFile(fake)
            file[name] = nil
            #expect(Self.loadError(try Self.bytes(file)) == .missingField(name))
            file[name] = NSNull()
            #expect(Self.loadError(try Self.bytes(file)) == .missingField(name))
        }
    }

    @Test func aBadFieldIsNamedAndTheFileIsNeverQuoted() throws {
        let fake = try FakeGooglePlay()
        defer { fake.stop() }
        let pem = fake.account.privateKey.pkcs8PEM
        let lines = pem.split(separator: "\n").map(String.init)
        // Half a key: every body line but the middle ones.
        let truncated = (lines.prefix(6) + lines.suffix(4)).joined(separator: "\n")
        let cases: [(field: String, value: Any, expectedField: String)] = [
            ("private_key", truncated, "private_key"),
            ("private_key", pem.replacingOccurrences(of: "PRIVATE KEY", with: "PUBLIC KEY"), "private_key"),
            ("private_key", PrivateKey().pkcs8PEM, "private_key"),
            ("private_key", 42, "private_key"),
            ("private_key", "", "private_key"),
            ("client_email", "nobody", "client_email"),
            ("client_email", ["a@b"], "client_email"),
            ("token_uri", "http://oauth2.example.com/token", "token_uri"),
            ("token_uri", "/token", "token_uri"),
            ("private_key_id", 7, "private_key_id"),
            ("type", "authorized_user", "type"),
        ]
        for (index, item) in cases.enumerated() {
            var file = try Self.keyFile(fake)
            file[item.field] = item.value
            let error = try #require(Self.loadError(try Self.bytes(file)), "case \(index)")
            guard case .badField(let field, _) = error else {
                Issue.record("case \(index): \(error)")
                continue
            }
            #expect(field == item.expectedField, "case \(index)")
            for text in ["\(error)", String(reflecting: error)] {
                for line in Self.secretLines(pem) + Self.secretLines(truncated) {
                    #expect(!text.contains(line), "case \(index) quotes the key")
                }
            }
        }
        // The EC key's error says what is wrong.
        var file = try Self.keyFile(fake)
        file["private_key"] = PrivateKey().pkcs8PEM
        #expect("\(try #require(Self.loadError(try Self.bytes(file))))".contains("not an RSA key"))
    }

    @Test func otherTextIsRefusedWithoutQuotingIt() throws {
        let fake = try FakeGooglePlay()
        defer { fake.stop() }
        let json = fake.serviceAccountJSON()
        #expect(Self.loadError([]) == .size(bytes: 0))
        #expect(Self.loadError([UInt8](repeating: 0x20, count: ServiceAccount.fileBytesMax + 1))
            == .size(bytes: ServiceAccount.fileBytesMax + 1))
        #expect(Self.loadError(Array("[1, 2]".utf8)) == .notJSON)
        // Cut short in the middle of the key: not JSON, and not quoted.
        let cut = Array(json.utf8.prefix(json.utf8.count / 2))
        let error = try #require(Self.loadError(cut))
        #expect(error == .notJSON)
        for line in Self.secretLines(fake.account.privateKey.pkcs8PEM) {
            #expect(!"\(error)".contains(line))
        }
    }

    @Test func theAccountNeverPrintsItsKey() throws {
        let fake = try FakeGooglePlay()
        defer { fake.stop() }
        let account = try ServiceAccount(json: Array(fake.serviceAccountJSON().utf8))
        var dumped = ""
        dump(account, to: &dumped)
        let texts = ["\(account)", String(reflecting: account), dumped, "\(Mirror(reflecting: account).children.map(\.value))"]
        for text in texts {
            #expect(text.contains(FakeGooglePlay.clientEmail))
            for line in Self.secretLines(account.privateKey.pkcs8PEM) {
                #expect(!text.contains(line))
            }
            #expect(!text.contains("PRIVATE KEY"))
        }
    }
}
