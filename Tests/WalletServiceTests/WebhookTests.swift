import Foundation
import Postgres
import ServiceTestSupport
import Testing
import TestSupport
import WalletCore
import WalletService

/// Webhook delivery through the real service to a real receiver on
/// loopback that checks every signature.
@Suite(.timeLimit(.minutes(3)))
struct WebhookTests {
    static let secret = Array("a-webhook-secret-of-32-bytes!!!!".utf8)

    /// A service that may send to http:// (loopback), retrying after a
    /// second, with an endpoint for `types` at `receiver`.
    static func service(_ receiver: WebhookReceiver, types: String = "{*}",
                        configure: (inout Configuration) -> Void = { _ in }) throws -> (TestService, Int64) {
        let service = try TestService { configuration in
            configuration.webhooksAllowHTTP = true
            configuration.webhookFirstRetrySeconds = 1
            configuration.webhookTimeoutSeconds = 2
            configure(&configuration)
        }
        let connection = try Connection(options: service.database)
        defer { connection.close() }
        let id = try connection.query("""
            SELECT wallet.add_webhook(\(receiver.url), \(types)::text[], \(ByteA(secret)), 'tests')
            """)[0].decode(Int64.self, at: 0)
        return (service, id)
    }

    /// The events of the ledger, by player, in id order.
    static func committed(_ service: TestService, types: [String]? = nil) throws -> [String: [Int64]] {
        let connection = try Connection(options: service.database)
        defer { connection.close() }
        var byPlayer: [String: [Int64]] = [:]
        for row in try connection.query("SELECT user_id, id, type FROM wallet.events ORDER BY id") {
            guard types?.contains(try row.decode(String.self, at: 2)) ?? true else { continue }
            byPlayer[try row.decode(String.self, at: 0), default: []].append(try row.decode(Int64.self, at: 1))
        }
        return byPlayer
    }

    @Test func everyEventArrivesSignedOnceAcceptedAndInOrderPerPlayer() throws {
        let receiver = try WebhookReceiver(secret: Self.secret, lifetimeSeconds: 120)
        defer { receiver.stop() }
        let (service, _) = try Self.service(receiver)
        defer { service.stop() }
        for (index, player) in ["p1", "p2", "p3"].enumerated() {
            #expect(try service.credit(userID: player, flowNo: "200000010\(index)").status == 201)
            for round in 0..<4 {
                #expect(try service.debit(userID: player, amount: 10, idempotencyKey: "\(player)-\(round)").status == 201)
            }
        }
        let committed = try Self.committed(service)
        #expect(committed.values.map(\.count).reduce(0, +) == 15)
        #expect(waitUntil(30) { receiver.firstAcceptances == committed })
        let deliveries = receiver.deliveries
        #expect(deliveries.allSatisfy { $0.signatureHolds && $0.headerEventID == String($0.eventID) })
        #expect(deliveries.allSatisfy { $0.userAgent?.hasPrefix("wallet-webhooks/") == true })
        // A wrong secret does not verify.
        #expect(!WebhookReceiver.signatureHolds("t=\(Int(Date().timeIntervalSince1970)),v1=00", body: [], secret: Self.secret))
    }

    @Test func aFailingPlayerWaitsInOrderWhileOthersFlowAndCatchesUp() throws {
        let receiver = try WebhookReceiver(secret: Self.secret, lifetimeSeconds: 120)
        defer { receiver.stop() }
        receiver.set(.failFor(["stuck"]))
        let (service, _) = try Self.service(receiver)
        defer { service.stop() }
        #expect(try service.credit(userID: "stuck", flowNo: "2000000201").status == 201)
        #expect(try service.debit(userID: "stuck", amount: 5, idempotencyKey: "s-1").status == 201)
        #expect(try service.credit(userID: "free", flowNo: "2000000202").status == 201)
        #expect(try service.debit(userID: "free", amount: 5, idempotencyKey: "f-1").status == 201)
        let committed = try Self.committed(service)
        // The other player's events arrive; the stuck player's first is
        // tried again and again, and its second is never sent before it.
        #expect(waitUntil(30) { receiver.firstAcceptances["free"] == committed["free"] })
        #expect(waitUntil(30) { receiver.deliveries.filter { $0.userID == "stuck" }.count >= 3 })
        guard let stuckFirst = committed["stuck"]?.first else { Issue.record("no events for stuck"); return }
        #expect(receiver.deliveries.filter { $0.userID == "stuck" }.allSatisfy { $0.eventID == stuckFirst })
        // It recovers: both arrive, in order.
        receiver.set(.accept)
        #expect(waitUntil(30) { receiver.firstAcceptances["stuck"] == committed["stuck"] })
        let metrics = try service.request("GET", "/metrics").text
        #expect(metrics.contains("wallet_webhook_deliveries_total{outcome=\"retried\"}"))
        #expect(!metrics.contains("wallet_webhook_deliveries_total{outcome=\"retried\"} 0\n"))
    }

    @Test func anEndpointGetsOnlyItsTypesAndWhatItMissedWhileDisabled() throws {
        let receiver = try WebhookReceiver(secret: Self.secret, lifetimeSeconds: 120)
        defer { receiver.stop() }
        let (service, id) = try Self.service(receiver, types: "{credit.refunded,balance.negative}")
        defer { service.stop() }
        let connection = try Connection(options: service.database)
        defer { connection.close() }
        #expect(try service.credit(userID: "r1", flowNo: "2000000301").status == 201)
        #expect(try service.debit(userID: "r1", amount: 100, idempotencyKey: "r-1").status == 201)
        #expect(try connection.query("SELECT wallet.set_webhook_enabled(\(id), FALSE, 'tests')")[0].decode(Bool.self, at: 0))
        try connection.query("SELECT * FROM wallet.refund_credit('2000000301', 'chargeback', 'alice')")
        Thread.sleep(forTimeInterval: 1)
        #expect(receiver.deliveries.isEmpty)
        #expect(try connection.query("SELECT wallet.set_webhook_enabled(\(id), TRUE, 'tests')")[0].decode(Bool.self, at: 0))
        let wanted = try Self.committed(service, types: ["credit.refunded", "balance.negative"])
        #expect(wanted["r1"]?.count == 2)
        #expect(waitUntil(30) { receiver.firstAcceptances == wanted })
        #expect(receiver.deliveries.map(\.type) == ["credit.refunded", "balance.negative"])
        let audit = try connection.query("SELECT action FROM wallet.admin_audit WHERE action LIKE 'webhook%' ORDER BY id")
            .map { $0[0] ?? "" }
        #expect(audit == ["webhook_add", "webhook_disable", "webhook_enable"])
    }

    /// An endpoint that fails everything for the retry period is disabled,
    /// and the metrics say so; its failed deliveries stay failed.
    @Test func anEndpointFailingForTheRetryPeriodIsDisabled() throws {
        let receiver = try WebhookReceiver(secret: Self.secret, lifetimeSeconds: 120)
        defer { receiver.stop() }
        receiver.set(.fail(503))
        let clock = ManualClock()
        let service = try TestService(clock: clock) { configuration in
            configuration.webhooksAllowHTTP = true
            configuration.webhookFirstRetrySeconds = 1
            configuration.webhookRetryHours = 1
        }
        defer { service.stop() }
        let connection = try Connection(options: service.database)
        defer { connection.close() }
        let id = try connection.query("""
            SELECT wallet.add_webhook(\(receiver.url), '{*}', \(ByteA(Self.secret)), 'tests')
            """)[0].decode(Int64.self, at: 0)
        #expect(try service.credit(userID: "d1", flowNo: "2000000401").status == 201)
        // The first failure is recorded: the endpoint is failing from then on.
        #expect(try waitUntil(30) {
            try connection.query("SELECT failing_since IS NOT NULL FROM wallet.webhook_endpoints WHERE id = \(id)")[0]
                .decode(Bool.self, at: 0)
        })
        clock.advance(by: .seconds(3_700))
        #expect(try waitUntil(30) {
            try connection.query("SELECT enabled FROM wallet.webhook_endpoints WHERE id = \(id)")[0]
                .decode(Bool.self, at: 0) == false
        })
        #expect(try connection.query("SELECT status FROM wallet.webhook_deliveries")[0].decode(String.self, at: 0) == "failed")
        let reason = try connection.query("SELECT disabled_reason FROM wallet.webhook_endpoints")[0].decode(String.self, at: 0)
        #expect(reason == "every delivery failed for 1 hours")
        #expect(try waitUntil(15) {
            try service.request("GET", "/metrics").text.contains("wallet_webhook_endpoint_enabled{endpoint=\"\(id)\"} 0")
        })
    }
}
