import Crypto
import Foundation
import GooglePlay
import Testing
import TestSupport
import ServiceTestSupport

/// `wallet doctor` through the real binary, against the fake App Store
/// Server API and the fake Google (token endpoint, Android Publisher API,
/// Pub/Sub) on loopback: a deployment that works, and three that do not,
/// each named on its FAIL line.
@Suite(.timeLimit(.minutes(2)))
struct DoctorTests {
    @Test func aWorkingDeploymentPassesEveryCheck() throws {
        let rig = try DoctorRig()
        defer { rig.stop() }
        let run = try rig.doctor()
        #expect(run.status == 0, "\(run.output)\(run.error)")
        let apple = rig.fixture.api
        let product = try #require(rig.google.received(pathContaining: "/purchases/products/").first?.path
            .split(separator: "/").dropLast(2).last.map(String.init), "no purchase lookup reached Google")
        #expect(run.lines == [
            "ok   configuration: every setting is valid; credit modes appstore-jws,appstore-api,googleplay have what they need",
            "ok   database: reached WALLET_DATABASE_URL's database; every migration of this build is applied",
            "ok   appstore verifier: the 1 root certificate(s) of WALLET_APPLE_ROOT_CERTS load; accepts bundle ids "
                + "\(FakeAppStore.bundleID) in Production, Sandbox, app Apple ID \(FakeAppStore.appAppleID)",
            "ok   appstore api Production: \(apple.productionURL) answered TransactionIdNotFound for a made-up transaction "
                + "id: it accepts key \(AppleAPIFixture.keyID), issuer \(AppleAPIFixture.issuerID) and bundle id \(FakeAppStore.bundleID)",
            "ok   appstore api Sandbox: \(apple.sandboxURL) answered TransactionIdNotFound for a made-up transaction "
                + "id: it accepts key \(AppleAPIFixture.keyID), issuer \(AppleAPIFixture.issuerID) and bundle id \(FakeAppStore.bundleID)",
            "ok   googleplay token: \(rig.google.account.tokenURI) granted \(FakeGooglePlay.clientEmail) an access token "
                + "for the Android Publisher API",
            "ok   googleplay purchases: \(rig.google.apiURL) answered not found for a made-up purchase token of \(product): "
                + "\(FakeGooglePlay.clientEmail) may read \(rig.google.packageName)'s purchases",
            "ok   googleplay push subscription: \(DoctorRig.subscription) pushes to \(DoctorRig.audience), signed as "
                + "\(DoctorRig.pushEmail) for audience \(DoctorRig.audience), as the service expects",
            "doctor: ok=8 failed=0 skipped=0",
        ])
        // Every store call was authenticated, and asked for nothing that exists.
        #expect(apple.received.map { "\($0.environment) \($0.path) \($0.authorized)" }
            == ["Production /inApps/v1/transactions/9999999999999999 true", "Sandbox /inApps/v1/transactions/9999999999999999 true"])
        let google = rig.google.received.filter { $0.path != "/token" }
        #expect(google.count == 2 && google.allSatisfy(\.authorized), "\(google)")
        #expect(google.last?.path == "/v1/\(DoctorRig.subscription)")
    }

    /// An App Store Server API key Apple does not know, and a service
    /// account key Google does not: each named on its own line.
    @Test func aWrongKeyIsNamed() throws {
        let rig = try DoctorRig()
        defer { rig.stop() }
        let otherAppleKey = rig.directory + "/other-key.p8"
        try PrivateKey().pkcs8PEM.write(toFile: otherAppleKey, atomically: true, encoding: .utf8)
        let otherAccount = rig.directory + "/other-service-account.json"
        try rig.google.serviceAccountJSON().replacingOccurrences(
            of: jsonString(rig.google.account.privateKey.pkcs8PEM), with: jsonString(RSAPrivateKey().pkcs8PEM)
        ).write(toFile: otherAccount, atomically: true, encoding: .utf8)
        let run = try rig.doctor(["WALLET_APPLE_API_PRIVATE_KEY_FILE": otherAppleKey,
                                  "WALLET_GOOGLE_SERVICE_ACCOUNT_FILE": otherAccount])
        #expect(run.status == 1)
        let apple = rig.fixture.api
        let unreleased = " (Production answers 401 until the app's first release)"
        for (environment, url, note) in [("Production", apple.productionURL, unreleased), ("Sandbox", apple.sandboxURL, "")] {
            #expect(run.lines.contains(
                "FAIL appstore api \(environment): \(url) refused the key (HTTP 401): check WALLET_APPLE_API_KEY_ID "
                    + "(\(AppleAPIFixture.keyID)), WALLET_APPLE_API_ISSUER_ID (\(AppleAPIFixture.issuerID)) and "
                    + "WALLET_APPLE_API_PRIVATE_KEY_FILE, and the bundle id \(FakeAppStore.bundleID)\(note)"), "\(run.output)")
        }
        let refused = "the service account key was refused (HTTP 400, invalid_grant) by \(rig.google.account.tokenURI) "
            + "(token_uri of WALLET_GOOGLE_SERVICE_ACCOUNT_FILE): WALLET_GOOGLE_SERVICE_ACCOUNT_FILE holds a "
            + "key of \(FakeGooglePlay.clientEmail) that Google does not accept (deleted, disabled, another project's), "
            + "or this machine's clock is off"
        #expect(run.lines.contains("FAIL googleplay token: " + refused), "\(run.output)")
        #expect(run.lines.contains("skip googleplay purchases: needs an access token (googleplay token, above)"))
        #expect(run.lines.contains("FAIL googleplay push subscription: " + refused), "\(run.output)")
        #expect(run.lines.last == "doctor: ok=3 failed=4 skipped=1")
        #expect(apple.received.allSatisfy { $0.tokenProblem == "signature" })
        #expect(rig.google.received.allSatisfy { $0.path == "/token" && $0.tokenProblem == "signature" })
    }

    /// The subscription signs its pushes for another audience than the
    /// service accepts: every push would be refused.
    @Test func aWrongPushAudienceIsNamed() throws {
        let rig = try DoctorRig(subscriptionAudience: "https://old.example.com/v1/googleplay/notifications")
        defer { rig.stop() }
        let run = try rig.doctor()
        #expect(run.status == 1)
        #expect(run.lines.contains(
            "FAIL googleplay push subscription: \(DoctorRig.subscription): its audience is "
                + "\"https://old.example.com/v1/googleplay/notifications\" but WALLET_GOOGLE_PUSH_AUDIENCE is "
                + "\"\(DoctorRig.audience)\": every push would be refused (401)"), "\(run.output)")
        #expect(run.lines.last == "doctor: ok=7 failed=1 skipped=0")
    }

    /// A store URL nothing listens on: the setting, the address and the
    /// error, within the store's timeout.
    @Test func anUnreachableStoreIsNamed() throws {
        let rig = try DoctorRig()
        defer { rig.stop() }
        let closed = try FakeServerAPI(credentials: rig.fixture.api.credentials)
        closed.stop()
        let started = ContinuousClock.now
        let run = try rig.doctor(["WALLET_APPLE_API_PRODUCTION_URL": closed.productionURL])
        #expect(started.duration(to: .now) < .seconds(DoctorRig.timeoutSeconds + 5))
        #expect(run.status == 1)
        #expect(run.lines.contains(
            "FAIL appstore api Production: cannot reach WALLET_APPLE_API_PRODUCTION_URL (\(closed.productionURL)): "
                + "get_transaction_info: the request failed (URLError -1004)"), "\(run.output)")
        #expect(run.lines.contains { $0.hasPrefix("ok   appstore api Sandbox: ") }, "\(run.output)")
        #expect(run.lines.last == "doctor: ok=7 failed=1 skipped=0")
    }

    /// A PEM as it appears inside a JSON string.
    private func jsonString(_ text: String) -> String {
        text.replacingOccurrences(of: "\n", with: "\\n")
    }
}

/// A deployment set up for every check: a migrated database, the fake App
/// Store Server API in both environments, and the fake Google with a push
/// subscription that matches the push settings unless told otherwise.
final class DoctorRig: @unchecked Sendable {
    static let audience = "https://wallet.example.com/v1/googleplay/notifications"
    static let pushEmail = FakeGoogleCerts.defaultEmail
    static let subscription = "projects/\(FakeGooglePlay.projectID)/subscriptions/play-rtdn-push"
    /// Each store's timeout: what an unreachable one costs.
    static let timeoutSeconds = 2

    let fixture: AppleAPIFixture
    let google: FakeGooglePlay
    let directory: String
    let environment: [String: String]

    init(subscriptionAudience: String = DoctorRig.audience) throws {
        fixture = try AppleAPIFixture()
        google = try FakeGooglePlay()
        google.setSubscription(.init(name: Self.subscription, pushEndpoint: Self.audience,
                                     serviceAccountEmail: Self.pushEmail, audience: subscriptionAudience))
        directory = NSTemporaryDirectory() + "wallet-doctor-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let accountFile = directory + "/service-account.json"
        try google.serviceAccountJSON().write(toFile: accountFile, atomically: true, encoding: .utf8)
        environment = [
            "WALLET_DATABASE_URL": TestService.conninfo(try TestDatabase.make()),
            "WALLET_CREDIT_VERIFICATION": "appstore-jws,appstore-api,googleplay",
            "WALLET_APPLE_BUNDLE_ID": FakeAppStore.bundleID,
            "WALLET_APPLE_APP_APPLE_ID": String(FakeAppStore.appAppleID),
            "WALLET_APPLE_ENVIRONMENTS": "Production,Sandbox",
            "WALLET_APPLE_ROOT_CERTS": fixture.rootFile,
            "WALLET_APPLE_API_KEY_ID": AppleAPIFixture.keyID,
            "WALLET_APPLE_API_ISSUER_ID": AppleAPIFixture.issuerID,
            "WALLET_APPLE_API_PRIVATE_KEY_FILE": fixture.keyFile,
            "WALLET_APPLE_API_PRODUCTION_URL": fixture.api.productionURL,
            "WALLET_APPLE_API_SANDBOX_URL": fixture.api.sandboxURL,
            "WALLET_APPLE_API_TIMEOUT_SECONDS": String(Self.timeoutSeconds),
            "WALLET_GOOGLE_SERVICE_ACCOUNT_FILE": accountFile,
            "WALLET_GOOGLE_PACKAGE_NAME": google.packageName,
            "WALLET_GOOGLE_API_URL": google.apiURL.absoluteString,
            "WALLET_GOOGLE_PUBSUB_URL": google.pubSubURL.absoluteString,
            "WALLET_GOOGLE_API_TIMEOUT_SECONDS": String(Self.timeoutSeconds),
            "WALLET_GOOGLE_PUSH_AUDIENCE": Self.audience,
            "WALLET_GOOGLE_PUSH_SERVICE_ACCOUNT": Self.pushEmail,
            "WALLET_GOOGLE_PUSH_SUBSCRIPTION": Self.subscription,
        ]
    }

    func stop() {
        fixture.stop()
        google.stop()
        try? FileManager.default.removeItem(atPath: directory)
    }

    /// `wallet doctor` with the rig's settings and `changes`.
    func doctor(_ changes: [String: String] = [:]) throws -> (status: Int32, lines: [String], output: String, error: String) {
        let run = try runProcess([CommandLineTests.walletBinary, "doctor"],
                                 environment: ChaosRun.walletEnvironment(environment.merging(changes) { $1 }),
                                 timeoutSeconds: 30)
        return (run.status, run.output.split(separator: "\n").map(String.init), run.output, run.error)
    }
}
