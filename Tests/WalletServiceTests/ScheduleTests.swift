import Foundation
import HTTPServer
import JSON
import Postgres
import ServiceTestSupport
import Testing
import TestSupport
import WalletCore
@testable import ServiceSupport
@testable import ServiceWorkers
@testable import WalletService

/// The background workers of the real service on a clock the test moves:
/// each runs once its interval or its backoff has passed on the clock, and
/// the test then waits for the worker to pause on the clock again (its pass
/// is over), never for time to pass.
@Suite(.serialized, .timeLimit(.minutes(2)))
struct ScheduleTests {
    // MARK: Holds

    /// A hold past its time is expired by the sweeper once the sweeper's
    /// interval has passed on the clock. Which holds are due is PostgreSQL's
    /// to say, so the due one is written as placed ten minutes ago.
    @Test func theSweeperExpiresADueHoldWhenItsIntervalHasPassed() throws {
        let clock = ManualClock()
        let service = try TestService(clock: clock) { $0.holdSweepIntervalSeconds = 600 }
        defer { service.stop() }
        let database = Probe(options: service.database)
        try database.execute("SELECT * FROM wallet.grant_coins('sweepee', 100, 'coin', 'setup', 'tests')")

        // The sweeper has looked once, and waits its ten minutes on the clock.
        let looked = try #require(clock.waitUntilWaiting(thread: "wallet-holds", seconds: 30))
        #expect(clock.lastWaitLength(thread: "wallet-holds").map { $0 > .seconds(599) && $0 <= .seconds(600) } == true)

        let inTime = try HoldTests.hold(service, user: "sweepee", amount: 40, key: "in-time")
        #expect(inTime.status == 201, "\(inTime.text)")
        try database.execute("""
            WITH placed AS (
                INSERT INTO wallet.holds (client, user_id, currency, amount, reason, expires_at, created_at)
                VALUES ('game-server', 'sweepee', 'coin', 60, 'match entry', now() - interval '5 minutes',
                        now() - interval '10 minutes')
                RETURNING user_id, currency, amount
            )
            UPDATE wallet.wallets w SET held = w.held + p.amount FROM placed p
            WHERE w.user_id = p.user_id AND w.currency = p.currency
            """)

        // Reads already leave the due hold out; its row waits for the sweeper.
        #expect(try HoldTests.available(service, "sweepee") == 60)
        #expect(try database.count("SELECT count(*) FROM wallet.holds WHERE status = 'held'") == 2)
        #expect(clock.waitUntilWaiting(thread: "wallet-holds", afterWaits: looked, seconds: 0) == nil, "no second look yet")

        clock.advance(by: .seconds(600))
        #expect(clock.waitUntilWaiting(thread: "wallet-holds", afterWaits: looked, seconds: 30) != nil)
        #expect(try database.count("SELECT count(*) FROM wallet.holds WHERE status = 'expired' AND amount = 60") == 1)
        #expect(try database.count("SELECT count(*) FROM wallet.holds WHERE status = 'held' AND amount = 40") == 1)
        #expect(try database.count("SELECT held FROM wallet.wallets WHERE user_id = 'sweepee'") == 40)
        #expect(try HoldTests.available(service, "sweepee") == 60)
        #expect(try service.violations() == [])
    }

    // MARK: The outbox

    /// A consumption answer Apple refuses for now is tried again when the
    /// outbox's first backoff (5 s) has passed on the clock, and its next
    /// attempt is recorded as that long after the failed one.
    @Test func theOutboxTriesAgainWhenItsBackoffHasPassed() throws {
        let fixture = try AppleAPIFixture()
        defer { fixture.stop() }
        let clock = ManualClock()
        let useAppleAPI = try Self.appleAPI(fixture)
        let service = try TestService(clock: clock) { useAppleAPI(&$0) }
        defer { service.stop() }
        let database = Probe(options: service.database)
        fixture.appleKnows("5000000800", environment: "Production")
        #expect(try Self.credit(service, flowNo: "5000000800", userID: "o1").status == 201)
        // Apple asks to come back in a minute, past the call's two seconds:
        // the call gives up at once, and the row waits for its backoff.
        fixture.api.fail(.init(status: 503, retryAfter: "60", pathContaining: "/transactions/consumption/"), count: 1)
        let startedOn = clock.date
        let request = fixture.notification("CONSUMPTION_REQUEST", flowNo: "5000000800", uuid: RefundNotifications.uuid(800))
        #expect(try Self.push(service, request) == 200)

        // The sender's pause ends with a move of the clock, and its pass sends.
        let paused = try #require(clock.waitUntilWaiting(thread: "wallet-outbox", seconds: 30))
        clock.advance(by: .seconds(OutboxSender.pollSeconds))
        let tried = try #require(clock.waitUntilWaiting(thread: "wallet-outbox", afterWaits: paused, seconds: 30))
        let triedOn = clock.date
        let row = try database.rows("""
            SELECT status, attempts::text, (last_error IS NOT NULL)::text,
                   (extract(epoch FROM next_attempt_at) * 1000)::bigint::text FROM wallet.outbox
            """)
        #expect(row.first?.prefix(3) == ["pending", "1", "true"])
        // Due again five seconds after the attempt, on the sender's clock.
        let due = Int64(row.first?.last ?? "") ?? 0
        #expect(due >= Self.milliseconds(startedOn) + 5_000 && due <= Self.milliseconds(triedOn) + 5_000,
                "\(due) against \(Self.milliseconds(startedOn))...\(Self.milliseconds(triedOn))")
        #expect(fixture.api.received(pathContaining: "/transactions/consumption/").count == 1)

        let advanced = ContinuousClock.now
        clock.advance(by: .seconds(OutboxSender.firstRetrySeconds))
        #expect(clock.waitUntilWaiting(thread: "wallet-outbox", afterWaits: tried, seconds: 30) != nil)
        #expect(advanced.duration(to: .now) < .seconds(OutboxSender.firstRetrySeconds), "sent on the clock, not on time")
        #expect(try database.rows("SELECT status, attempts::text FROM wallet.outbox") == [["sent", "2"]])
        #expect(fixture.api.received(pathContaining: "/transactions/consumption/").count == 2)
        let list = try ChaosRun.walletCommand(["appstore", "consumption", "list"],
                                              databaseURL: TestService.conninfo(service.database))
        let line = list.output.split(separator: "\n").first { $0.contains("5000000800") }.map(String.init) ?? ""
        #expect(line.contains("\tsent\t2\t"), "\(list.output)")
        #expect(line.contains(#""deliveryStatus": "DELIVERED""#), "\(line)")
    }

    /// A Google Play consume Google asks to wait for is tried again once the
    /// outbox's backoff has passed on the clock, and counted as retried.
    @Test func aGooglePlayConsumeIsTriedAgainWhenItsBackoffHasPassed() throws {
        let google = try FakeGooglePlay()
        defer { google.stop() }
        let accountFile = NSTemporaryDirectory() + "wallet-schedule-\(UUID().uuidString).json"
        try google.serviceAccountJSON().write(toFile: accountFile, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(atPath: accountFile) }
        let clock = ManualClock()
        let service = try TestService(clock: clock) { configuration in
            configuration.creditVerification = [.googlePlay, .caller]
            configuration.google.serviceAccountFile = accountFile
            configuration.google.packageName = google.packageName
            configuration.google.apiURL = google.apiURL
            configuration.google.apiTimeoutSeconds = 2
            configuration.google.voidedPollMinutes = 0
        }
        defer { service.stop() }
        let database = Probe(options: service.database)
        google.setPurchase(productID: "guodong600", token: "tok-retry", .purchased(orderId: "GPA.8-1"))
        google.fail(.init(status: 503, retryAfter: "60", pathContaining: ":consume"), count: 1)
        let credited = try service.request("POST", "/v1/credits", key: service.appBackendKey, json: """
            {"user_id":"droid-7","product_id":"guodong600","google_purchase_token":"tok-retry"}
            """)
        #expect(credited.status == 201, "\(credited.text)")

        let paused = try #require(clock.waitUntilWaiting(thread: "wallet-outbox", seconds: 30))
        clock.advance(by: .seconds(OutboxSender.pollSeconds))
        let tried = try #require(clock.waitUntilWaiting(thread: "wallet-outbox", afterWaits: paused, seconds: 30))
        #expect(try database.rows("SELECT status, attempts::text FROM wallet.outbox WHERE key = 'tok-retry'")
            == [["pending", "1"]])
        #expect(google.consumed.isEmpty)

        clock.advance(by: .seconds(OutboxSender.firstRetrySeconds))
        #expect(clock.waitUntilWaiting(thread: "wallet-outbox", afterWaits: tried, seconds: 30) != nil)
        #expect(try database.rows("SELECT status, attempts::text FROM wallet.outbox WHERE key = 'tok-retry'")
            == [["sent", "2"]])
        #expect(google.consumed.map(\.token) == ["tok-retry"])
        let metrics = try service.request("GET", "/metrics").text
        #expect(metrics.contains(#"wallet_googleplay_consume_total{outcome="sent"} 1"#))
        #expect(metrics.contains(#"wallet_googleplay_consume_total{outcome="retried"} 1"#))
        #expect(metrics.contains(#"wallet_googleplay_api_requests_total{endpoint="consume_product_purchase",status="5xx"} 1"#))
    }

    // MARK: Sweeps

    /// The notification-history sweep runs first its delay after the start,
    /// then every interval, each from an hour before the last one's end: a
    /// refund Apple could not deliver is applied by the first.
    @Test func theHistorySweepRunsAfterItsDelayThenEveryIntervalFromItsMark() throws {
        let fixture = try AppleAPIFixture()
        defer { fixture.stop() }
        let clock = ManualClock()
        let useAppleAPI = try Self.appleAPI(fixture)
        let service = try TestService(clock: clock) { configuration in
            useAppleAPI(&configuration)
            configuration.apple.api.consumptionConsent = false
            configuration.apple.api.reconcileIntervalMinutes = 60
        }
        defer { service.stop() }
        fixture.appleKnows("5000000550", environment: "Production")
        #expect(try Self.credit(service, flowNo: "5000000550", userID: "s1").status == 201)
        fixture.api.addNotification(fixture.notification("REFUND", flowNo: "5000000550", uuid: RefundNotifications.uuid(550)),
                                    signedDateMilliseconds: AppleAPIFixture.nowMilliseconds(), environment: "Production")

        let delayed = try #require(clock.waitUntilWaiting(thread: "wallet-history", seconds: 30))
        #expect(clock.lastWaitLength(thread: "wallet-history").map { $0 > .seconds(4) && $0 <= .seconds(5) } == true)
        #expect(fixture.api.received(pathContaining: "/notifications/history").isEmpty)
        clock.advance(by: .seconds(ReconcileSchedule.firstDelaySeconds))
        let first = try #require(clock.waitUntilWaiting(thread: "wallet-history", afterWaits: delayed, seconds: 30))
        #expect(try service.count("SELECT count(*) FROM wallet.credits WHERE status = 'refunded'") == 1)
        #expect(try service.count("SELECT count(*) FROM wallet.appstore_reconcile_marks") == 1)
        #expect(clock.lastWaitLength(thread: "wallet-history").map { $0 > .seconds(3_599) && $0 <= .seconds(3_600) } == true)

        // One sweeper at a time: the command finds the lock free again, and
        // everything recorded already.
        let manual = try runProcess([ServerProcess.walletBinary, "appstore", "reconcile"],
                                    environment: Self.appleAPIEnvironment(fixture, databaseURL: TestService.conninfo(service.database)),
                                    timeoutSeconds: 60)
        #expect(manual.status == 0, "\(manual.output) \(manual.error)")
        #expect(ServerAPITests.summary(manual.output)["already"] == 1, "\(manual.output)")

        // An hour on, the next sweep reads from an hour before the mark.
        let mark = try service.count("""
            SELECT (extract(epoch FROM swept_until) * 1000)::bigint FROM wallet.appstore_reconcile_marks
            """)
        clock.advance(by: .seconds(3_600))
        #expect(clock.waitUntilWaiting(thread: "wallet-history", afterWaits: first, seconds: 30) != nil)
        let bodies = fixture.api.received(pathContaining: "/notifications/history").compactMap(\.bodyJSON)
        #expect(bodies.count == 3)
        if let firstSweep = bodies.first, let secondSweep = bodies.last, bodies.count == 3 {
            func field(_ body: [String: Any], _ name: String) -> Int64 { (body[name] as? NSNumber)?.int64Value ?? 0 }
            #expect(field(secondSweep, "startDate") == Int64(mark) - 3_600_000)
            // It ends an hour of the clock after the first one did.
            let apart = field(secondSweep, "endDate") - field(firstSweep, "endDate")
            #expect(apart >= 3_600_000 && apart < 3_600_000 + 60_000, "\(apart)")
        }
        #expect(try service.count("SELECT count(*) FROM wallet.appstore_notifications WHERE outcome = 'refunded'") == 1)
        #expect(try service.violations() == [])
    }

    // MARK: Helpers

    /// Sets the App Store Server API on `fixture`, flowNO-only credits
    /// through it, and consumption answers on.
    static func appleAPI(_ fixture: AppleAPIFixture) throws -> (inout Configuration) -> Void {
        let productionURL = try #require(URL(string: fixture.api.productionURL))
        let sandboxURL = try #require(URL(string: fixture.api.sandboxURL))
        return { configuration in
            configuration.creditVerification = [.appStoreAPI]
            configuration.apple.bundleIDs = [FakeAppStore.bundleID]
            configuration.apple.environments = ["Production"]
            configuration.apple.appAppleID = FakeAppStore.appAppleID
            configuration.apple.rootCertificatePaths = [fixture.rootFile]
            configuration.apple.api.keyID = AppleAPIFixture.keyID
            configuration.apple.api.issuerID = AppleAPIFixture.issuerID
            configuration.apple.api.privateKeyFile = fixture.keyFile
            configuration.apple.api.productionURL = productionURL
            configuration.apple.api.sandboxURL = sandboxURL
            configuration.apple.api.timeoutSeconds = 2
            configuration.apple.api.reconcileIntervalMinutes = 0
            configuration.apple.api.consumptionConsent = true
        }
    }

    /// The same settings for a `wallet` command.
    static func appleAPIEnvironment(_ fixture: AppleAPIFixture, databaseURL: String) -> [String: String] {
        ChaosRun.walletEnvironment([
            "WALLET_DATABASE_URL": databaseURL,
            "WALLET_APPLE_BUNDLE_ID": FakeAppStore.bundleID,
            "WALLET_APPLE_ENVIRONMENTS": "Production",
            "WALLET_APPLE_APP_APPLE_ID": String(FakeAppStore.appAppleID),
            "WALLET_APPLE_ROOT_CERTS": fixture.rootFile,
            "WALLET_APPLE_API_KEY_ID": AppleAPIFixture.keyID,
            "WALLET_APPLE_API_ISSUER_ID": AppleAPIFixture.issuerID,
            "WALLET_APPLE_API_PRIVATE_KEY_FILE": fixture.keyFile,
            "WALLET_APPLE_API_PRODUCTION_URL": fixture.api.productionURL,
            "WALLET_APPLE_API_SANDBOX_URL": fixture.api.sandboxURL,
            "WALLET_APPLE_API_TIMEOUT_SECONDS": "2",
        ])
    }

    static func credit(_ service: TestService, flowNo: String, userID: String) throws -> HTTPTestResponse {
        try service.request("POST", "/v1/credits", key: service.appBackendKey,
                            json: #"{"user_id":"\#(userID)","flow_no":"\#(flowNo)","product_id":"guodong600"}"#)
    }

    static func push(_ service: TestService, _ signedPayload: String) throws -> Int {
        try service.request("POST", "/v1/appstore/notifications", json: #"{"signedPayload":"\#(signedPayload)"}"#).status
    }

    static func milliseconds(_ date: Date) -> Int64 {
        Int64((date.timeIntervalSince1970 * 1000).rounded(.down))
    }

    /// Reads a service's database on connections of its own.
    struct Probe: ProbesDatabase {
        let options: Connection.Options
    }
}
