import Crypto
import Foundation
import GooglePlay
import HTTPServer
import JSON
import Locking
import Postgres
import Testing
import TestSupport
@testable import ServiceAPI
@testable import ServiceSupport
@testable import WalletService
import ServiceTestSupport
@testable import WalletStore

/// Google Play credits through the real `wallet serve`, against a fake
/// Google on loopback that checks the service account's RS256 assertion
/// and its access tokens as Google does.
@Suite(.timeLimit(.minutes(3)))
struct GooglePlayCreditTests {
    @Test func oneTokenCreditsOnceUnderThirtyTwoThreadsAndIsConsumed() throws {
        let rig = try GooglePlayRig()
        defer { rig.stop() }
        rig.google.setPurchase(productID: "guodong600", token: "tok-concurrent", .purchased(orderId: "GPA.1111-2222-3333-44444"))
        let statuses = Locked<[Int: Int]>([:])
        let entries = Locked<Set<String>>([])
        #expect(runOnThreads(32) { _ in
            guard let response = try? rig.credit(token: "tok-concurrent", userID: "droid-1") else { return }
            statuses.withLock { $0[response.status, default: 0] += 1 }
            if let entry = (try? response.json())?["credit"]?["entry_id"] { entries.withLock { _ = $0.insert("\(entry)") } }
        })
        #expect(statuses.withLock { $0 } == [201: 1, 200: 31])
        #expect(entries.withLock { $0.count } == 1, "every answer names the one entry")
        #expect(try rig.count("SELECT count(*) FROM wallet.credits WHERE purchase_token = 'tok-concurrent'") == 1)
        #expect(try rig.rows("""
            SELECT flow_no, source, environment, amount::text FROM wallet.credits WHERE purchase_token = 'tok-concurrent'
            """) == [["GPA.1111-2222-3333-44444", "googleplay", "Production", "600"]])
        #expect(try rig.count("SELECT balance FROM wallet.wallets WHERE user_id = 'droid-1'") == 600)
        // Consumed once, through the outbox.
        #expect(waitFor(seconds: 30) {
            (try? rig.count("SELECT count(*) FROM wallet.outbox WHERE kind = 'googleplay_consume' AND status = 'sent'")) == 1
        })
        #expect(rig.google.consumed.map(\.token) == ["tok-concurrent"])
        let received = rig.google.received
        #expect(received.allSatisfy { $0.authorized })
        #expect(try rig.violations() == 0)

        let list = try rig.walletCommand(["googleplay", "consumption", "list"])
        #expect(list.status == 0, "\(list)")
        #expect(list.output.contains("tok-concurrent\tGPA.1111-2222-3333-44444\tProduction\tsent\t1\t"))
    }

    @Test func aPendingPurchaseIsCreditedOnceItIsPaid() throws {
        let rig = try GooglePlayRig()
        defer { rig.stop() }
        rig.google.setPurchase(productID: "guodong1200", token: "tok-pending", .pending(orderId: "GPA.5555-0000-0000-00001"))
        let pending = try rig.credit(token: "tok-pending", userID: "droid-2", productID: "guodong1200")
        #expect(pending.status == 409)
        #expect(try pending.json()["code"] == "purchase_pending")
        #expect(pending.header("Retry-After") != nil)
        #expect(try rig.count("SELECT count(*) FROM wallet.credits") == 0)

        rig.google.setPurchase(productID: "guodong1200", token: "tok-pending", .purchased(orderId: "GPA.5555-0000-0000-00001"))
        let paid = try rig.credit(token: "tok-pending", userID: "droid-2", productID: "guodong1200")
        #expect(paid.status == 201)
        #expect(try paid.json()["credit"]?["flow_no"] == "GPA.5555-0000-0000-00001")
        #expect(try paid.json()["balance"]?["balance"] == 1200)
        // A retry is answered from the ledger, without asking Google.
        let asked = rig.google.received(pathContaining: "/tokens/tok-pending").count
        #expect(try rig.credit(token: "tok-pending", userID: "droid-2", productID: "guodong1200").status == 200)
        #expect(rig.google.received(pathContaining: "/tokens/tok-pending").count == asked)
    }

    @Test func refusalsNameTheirReasonAndCreditNothing() throws {
        let rig = try GooglePlayRig()
        defer { rig.stop() }
        let google = rig.google
        google.setPurchase(productID: "guodong600", token: "tok-canceled", .canceled())
        google.setPurchase(productID: "guodong600", token: "tok-rewarded", .rewarded())
        google.setPurchase(productID: "guodong600", token: "tok-test", .test())
        google.setPurchase(productID: "guodong600", token: "tok-eleven", .purchased(orderId: "GPA.9-11", quantity: 11))
        google.setPurchase(productID: "guodong600", token: "tok-three", .purchased(orderId: "GPA.9-3", quantity: 3))
        google.setGone(productID: "guodong600", token: "tok-gone")
        let cases: [(token: String, extra: String, status: Int, code: String, reason: String?)] = [
            ("tok-canceled", "", 422, "verification_failed", "revoked"),
            ("tok-rewarded", "", 422, "verification_failed", "not_consumable"),
            ("tok-test", "", 422, "verification_failed", "environment_not_allowed"),
            ("tok-eleven", "", 422, "verification_failed", "quantity_out_of_range"),
            ("tok-unknown", "", 422, "verification_failed", "transaction_not_found"),
            ("tok-gone", "", 422, "verification_failed", "transaction_not_found"),
            ("tok-three", #","flow_no":"GPA.9-4""#, 422, "verification_failed", "transaction_mismatch"),
            ("tok-three", #","quantity":2"#, 422, "verification_failed", "transaction_mismatch"),
            ("tok-three", #","signed_transaction":"a.b.c""#, 422, "validation_failed", nil),
            ("tok-three", #","receipt_data":"YQ==""#, 422, "validation_failed", nil),
        ]
        for item in cases {
            let response = try rig.credit(token: item.token, userID: "droid-3", extra: item.extra)
            #expect(response.status == item.status, "\(item)")
            #expect(try response.json()["code"] == .string(item.code), "\(item)")
            if let reason = item.reason { #expect(try response.json()["reason"] == .string(reason), "\(item)") }
        }
        let unknownProduct = try rig.credit(token: "tok-three", userID: "droid-3", productID: "no-such-product")
        #expect(unknownProduct.status == 422)
        #expect(try unknownProduct.json()["code"] == "unknown_product")
        #expect(try rig.count("SELECT count(*) FROM wallet.credits") == 0)
        #expect(try rig.count("SELECT count(*) FROM wallet.outbox") == 0)

        // Google down: 503, nothing credited, and the same request later succeeds.
        google.fail(.init(status: 500, pathContaining: "/tokens/tok-three"), count: 1_000)
        let down = try rig.credit(token: "tok-three", userID: "droid-3")
        #expect(down.status == 503)
        #expect(try down.json()["code"] == "verification_unavailable")
        google.clearFailures()
        let three = try rig.credit(token: "tok-three", userID: "droid-3")
        #expect(three.status == 201)
        #expect(try three.json()["credit"]?["quantity"] == 3)
        #expect(try three.json()["credit"]?["amount"] == 1800)
        #expect(try rig.violations() == 0)
    }

    @Test func aPurchaseIsBoundToTheAccountThatMadeIt() throws {
        let rig = try GooglePlayRig()
        defer { rig.stop() }
        let mine = PurchasePolicy.accountID(forUserID: "droid-4")
        #expect(mine == SHA256.hex(Array("droid-4".utf8)))
        rig.google.setPurchase(productID: "guodong600", token: "tok-bound", .purchased(orderId: "GPA.4-1", accountID: mine))
        let stolen = try rig.credit(token: "tok-bound", userID: "droid-5")
        #expect(stolen.status == 422)
        #expect(try stolen.json()["reason"] == "account_mismatch")
        #expect(try rig.credit(token: "tok-bound", userID: "droid-4").status == 201)

        // Required: a purchase without the id is refused.
        let strict = try GooglePlayRig(extra: ["WALLET_GOOGLE_REQUIRE_ACCOUNT_ID": "true"])
        defer { strict.stop() }
        strict.google.setPurchase(productID: "guodong600", token: "tok-unbound", .purchased(orderId: "GPA.4-2"))
        let unbound = try strict.credit(token: "tok-unbound", userID: "droid-4")
        #expect(unbound.status == 422)
        #expect(try unbound.json()["reason"] == "account_mismatch")
    }

    @Test func environmentsAndFlowNOsComeFromGoogle() throws {
        let rig = try GooglePlayRig(extra: ["WALLET_GOOGLE_ALLOW_TEST_PURCHASES": "true"])
        defer { rig.stop() }
        rig.google.setPurchase(productID: "guodong600", token: "tok-tester", .test(orderId: "GPA.7-1"))
        rig.google.setPurchase(productID: "guodong600", token: "tok-promo", .promo())
        #expect(try rig.credit(token: "tok-tester", userID: "droid-6").status == 201)
        let promo = try rig.credit(token: "tok-promo", userID: "droid-6")
        #expect(promo.status == 201)
        // No orderId: the flowNO is derived from the token.
        let derived = "gp:" + hexString(SHA256.hash(Array("tok-promo".utf8)).prefix(16))
        #expect(try promo.json()["credit"]?["flow_no"] == .string(derived))
        #expect(try rig.rows("SELECT flow_no, environment FROM wallet.credits ORDER BY flow_no") == [
            ["GPA.7-1", "Test"], [derived, "Promo"],
        ])
        // The catalog's Google id is what Google is asked about.
        try rig.execute("SELECT * FROM wallet.upsert_product('guodong5000', 5000, 'coin', NULL, 'tests', NULL, 'coins_5000')")
        rig.google.setPurchase(productID: "coins_5000", token: "tok-mapped", .purchased(orderId: "GPA.7-3"))
        #expect(try rig.credit(token: "tok-mapped", userID: "droid-6", productID: "guodong5000").status == 201)
        #expect(rig.google.received(pathContaining: "/products/coins_5000/tokens/tok-mapped").count == 1)
    }

    /// Google's answer must be about the product the purchase was looked
    /// up under: a token of a cheap product must not buy a dear one.
    @Test func aPurchaseOfAnotherProductIsRefused() throws {
        let rig = try GooglePlayRig()
        defer { rig.stop() }
        // A ProductPurchase as purchases.products.get writes it
        // (https://developers.google.com/android-publisher/api-ref/rest/v3/purchases.products),
        // naming another product than the one asked about.
        rig.google.setPurchaseJSON(productID: "guodong5000", token: "tok-other", """
            {"kind":"androidpublisher#productPurchase","purchaseTimeMillis":"1760000000000","purchaseState":0,\
            "consumptionState":0,"orderId":"GPA.20-1","acknowledgementState":0,"regionCode":"US","productId":"guodong600"}
            """)
        let response = try rig.credit(token: "tok-other", userID: "droid-20", productID: "guodong5000")
        #expect(response.status == 422, "\(response.text)")
        #expect(try response.json()["code"] == "verification_failed")
        #expect(try response.json()["reason"] == "product_mismatch")
        #expect(try rig.count("SELECT count(*) FROM wallet.credits") == 0)
        #expect(try rig.count("SELECT coalesce(sum(balance), 0) FROM wallet.wallets") == 0)
    }

    /// Two catalog products with one Google Play id: the catalog refuses to
    /// make the pair, and a database that holds one from before credits
    /// neither until it is mended; never the dearer for the cheaper's price.
    @Test func aGoogleIdTwoProductsShareNeverBuysTheDearerOne() throws {
        let rig = try GooglePlayRig()
        defer { rig.stop() }
        do {
            try rig.execute("""
                SELECT * FROM wallet.upsert_product('guodong5000', 5000, 'coin', NULL, 'tests', NULL, 'guodong600')
                """)
            Issue.record("guodong5000 was given guodong600's Google Play id")
        } catch let error as PostgresError {
            #expect(error.sqlState?.code == "WL009")
        }
        // A pair written before the rule, past the function.
        try rig.execute("UPDATE wallet.products SET google_product_id = 'guodong600' WHERE product_id = 'guodong5000'")
        rig.google.setPurchase(productID: "guodong600", token: "tok-shared", .purchased(orderId: "GPA.21-1"))
        for product in ["guodong5000", "guodong600"] {
            let response = try rig.credit(token: "tok-shared", userID: "droid-21", productID: product)
            #expect(response.status == 422, "\(product): \(response.text)")
            #expect(try response.json()["reason"] == "product_mismatch", "\(product)")
        }
        #expect(try rig.count("SELECT count(*) FROM wallet.credits") == 0)
        // Mended: the dear one off sale, the purchase buys its own amount.
        try rig.execute("SELECT * FROM wallet.upsert_product('guodong5000', 5000, 'coin', FALSE, 'tests', 'one id, one product', NULL)")
        let mended = try rig.credit(token: "tok-shared", userID: "droid-21", productID: "guodong600")
        #expect(mended.status == 201, "\(mended.text)")
        #expect(try mended.json()["credit"]?["amount"] == 600)
        #expect(try rig.count("SELECT balance FROM wallet.wallets WHERE user_id = 'droid-21'") == 600)
    }
}

/// Google Play's settings: each refused with a message that names it.
struct GooglePlayConfigurationTests {
    @Test func googlePlayNeedsItsAccountAndPackage() throws {
        let base = ["WALLET_DATABASE_URL": "host=/nowhere", "WALLET_CREDIT_VERIFICATION": "googleplay"]
        do {
            try Configuration.load(environment: base).validateForServing()
            Issue.record("googleplay without a service account was accepted")
        } catch {
            #expect(error.variable == "WALLET_GOOGLE_SERVICE_ACCOUNT_FILE")
        }
        do {
            try Configuration.load(environment: base.merging(["WALLET_GOOGLE_SERVICE_ACCOUNT_FILE": "/x.json"]) { $1 })
                .validateForServing()
            Issue.record("googleplay without a package name was accepted")
        } catch {
            #expect(error.variable == "WALLET_GOOGLE_PACKAGE_NAME")
        }
        for (name, value) in [("WALLET_GOOGLE_ALLOW_TEST_PURCHASES", "yes"), ("WALLET_GOOGLE_REQUIRE_ACCOUNT_ID", "1"),
                              ("WALLET_GOOGLE_API_TIMEOUT_SECONDS", "0"), ("WALLET_GOOGLE_API_URL", "ftp://x")] {
            #expect(throws: Configuration.ConfigurationError.self) {
                try Configuration.load(environment: base.merging([name: value]) { $1 })
            }
        }
        let google = try Configuration.load(environment: [:]).google
        #expect(google.apiURL.absoluteString == "https://androidpublisher.googleapis.com")
        #expect(google.apiTimeoutSeconds == 10)
        #expect(!google.allowTestPurchases && !google.requireAccountID)
    }

    @Test func anUnreadableKeyFileStopsStartUpNamingTheVariableNotTheKey() throws {
        let directory = NSTemporaryDirectory() + "wallet-google-key-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let secret = "-----BEGIN PRIVATE KEY-----\nTOP-SECRET-MATERIAL\n-----END PRIVATE KEY-----\n"
        let file = directory + "/key.json"
        try #"{"type":"service_account","client_email":"a@b.iam.gserviceaccount.com","token_uri":"https://oauth2.googleapis.com/token","private_key":"\#(secret.replacingOccurrences(of: "\n", with: "\\n"))"}"#
            .write(toFile: file, atomically: true, encoding: .utf8)
        var configuration = Configuration()
        configuration.google.serviceAccountFile = file
        configuration.google.packageName = "com.example.coins"
        do {
            _ = try GooglePlaySetup.client(configuration, metrics: Metrics())
            Issue.record("a key file without a usable key was accepted")
        } catch {
            #expect(error.variable == "WALLET_GOOGLE_SERVICE_ACCOUNT_FILE")
            #expect(!error.description.contains("TOP-SECRET"))
        }
        configuration.google.serviceAccountFile = directory + "/missing.json"
        #expect(throws: Configuration.ConfigurationError.self) { try GooglePlaySetup.client(configuration, metrics: Metrics()) }
    }
}

/// A fake Google and the real `wallet serve` configured for it.
final class GooglePlayRig: Sendable, ProbesDatabase {
    let options: Connection.Options
    let url: String
    let google: FakeGooglePlay
    let directory: String
    let environment: [String: String]
    let appKey: String
    let server: ServerProcess
    let port: UInt16

    init(extra: [String: String] = [:]) throws {
        options = try TestDatabase.make()
        url = TestService.conninfo(options)
        google = try FakeGooglePlay()
        directory = NSTemporaryDirectory() + "wallet-google-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let accountFile = directory + "/service-account.json"
        try google.serviceAccountJSON().write(toFile: accountFile, atomically: true, encoding: .utf8)
        environment = ChaosRun.walletEnvironment([
            "WALLET_DATABASE_URL": url,
            "WALLET_LISTEN": "127.0.0.1:0",
            "WALLET_LOG_LEVEL": "warning",
            "WALLET_CREDIT_VERIFICATION": "googleplay,caller",
            "WALLET_GOOGLE_SERVICE_ACCOUNT_FILE": accountFile,
            "WALLET_GOOGLE_PACKAGE_NAME": google.packageName,
            "WALLET_GOOGLE_API_URL": google.apiURL.absoluteString,
            "WALLET_GOOGLE_API_TIMEOUT_SECONDS": "2",
        ].merging(extra) { _, new in new })
        appKey = try ChaosRun.walletCommand(["keys", "create", "--name", "app-backend", "--scopes", "credit,read"],
                                            databaseURL: url).lastLine
        server = try ServerProcess(binary: CommandLineTests.walletBinary, environment: environment, capturingLog: true)
        do {
            port = try server.waitForPort()
            try #require(RefundRaceTests.waitForReady(port: port, seconds: 30))
        } catch {
            server.kill()
            google.stop()
            throw error
        }
    }

    func stop() {
        server.kill()
        google.stop()
        try? FileManager.default.removeItem(atPath: directory)
    }

    func credit(token: String, userID: String, productID: String = "guodong600", extra: String = "") throws -> HTTPTestResponse {
        try request("POST", "/v1/credits", key: appKey, body: """
            {"user_id":"\(userID)","product_id":"\(productID)","google_purchase_token":"\(token)"\(extra)}
            """)
    }

    func request(_ method: String, _ path: String, key: String?, body: String?) throws -> HTTPTestResponse {
        try TestService.request(port: port, method, path, key: key, json: body)
    }

    func walletCommand(_ arguments: [String]) throws -> (status: Int32, output: String, error: String) {
        try runProcess([ServerProcess.walletBinary] + arguments, environment: environment, timeoutSeconds: 60)
    }
}
