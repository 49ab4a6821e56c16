import Crypto
import Foundation
import JSON
import Postgres
import ServiceTestSupport
import Testing
import TestSupport

/// Every change reaches the game server: `wallet serve` on a cluster of its
/// own, 2,000 mixed operations over 50 players (credits, debits, holds that
/// are captured, released or left to expire, admin grants and refunds
/// through Scripts/admin, App Store refunds signed by a fake Apple, Google
/// refunds pushed by a fake Google), and a webhook receiver on loopback
/// that checks every signature. Between the operations: the receiver
/// answers 500 for a minute, then hangs past the time limit, the service is
/// killed with SIGKILL while deliveries are under way and started again,
/// and PostgreSQL restarts. Afterwards the receiver has accepted every
/// event, in order per player, any duplicate under the same event id; the
/// feed from cursor 0 gives exactly the committed events, whose amounts add
/// up to each balance; and `wallet check` is clean.
@Suite(.timeLimit(.minutes(8)))
struct EventDeliveryAcceptanceTests {
    static let secret = Array("acceptance-webhook-secret-0123456789".utf8)
    static let players = (0..<50).map { String(format: "ev-player-%02d", $0) }
    static let operations = 2_000

    @Test func everyEventReachesTheGameServerThroughFaults() throws {
        let rig = try AcceptanceRig()
        defer { rig.stop() }
        var random = SplitMix64(seed: 20_261_207)
        var driver = AcceptanceDriver(rig: rig)
        var failingSince = Date()
        for index in 0..<Self.operations {
            switch index {
            case 400:
                rig.receiver.set(.fail(500))
                failingSince = Date()
            case 700:
                // A minute of 500s, operations going on meanwhile.
                Thread.sleep(forTimeInterval: max(0, 60 - Date().timeIntervalSince(failingSince)))
                rig.receiver.set(.accept)
            case 900: rig.receiver.set(.hang(seconds: 3))
            case 1_000:
                rig.receiver.set(.accept)
            case 1_200:
                // Deliveries under way: the receiver sits on one, and the
                // service dies in the middle of it.
                rig.receiver.set(.hang(seconds: 2))
                let before = rig.receiver.arrivals
                _ = waitUntil(20) { rig.receiver.arrivals > before }
                try rig.killAndRestart()
                rig.receiver.set(.accept)
            case 1_600: try rig.cluster.restart(mode: .fast)
            default: break
            }
            try driver.step(&random)
        }
        // Expiry is the database's: the last short holds are due within seconds.
        Thread.sleep(forTimeInterval: 2.5)
        try driver.settleExpiredHolds()

        let committed = try rig.events()
        // Reads and refusals change nothing; every player's wallet changed.
        #expect(Set(committed.map(\.userID)) == Set(Self.players))
        let kinds = Set(committed.map(\.type))
        for type in ["credit.created", "credit.refunded", "debit.created", "hold.placed", "hold.captured", "hold.released",
                     "hold.expired", "grant.created"] {
            #expect(kinds.contains(type), "no \(type) event")
        }
        let sources = try rig.rows("SELECT DISTINCT data->>'source' FROM wallet.events WHERE type = 'credit.refunded'")
        #expect(Set(sources.map { $0[0] }) == ["admin", "apple", "google"])

        // Every event accepted, in order per player; duplicates carry their own id.
        let byPlayer = Dictionary(grouping: committed, by: \.userID).mapValues { $0.map(\.id) }
        let delivered = waitUntil(180) { rig.receiver.firstAcceptances == byPlayer }
        let accepted = rig.receiver.firstAcceptances
        #expect(delivered, "players whose events differ: \(byPlayer.keys.filter { accepted[$0] != byPlayer[$0] }.sorted())")
        let deliveries = rig.receiver.deliveries
        #expect(deliveries.allSatisfy { $0.signatureHolds }, "a delivery's signature did not hold")
        #expect(deliveries.allSatisfy { $0.headerEventID == String($0.eventID) })
        // Each player's accepted events arrived in id order; an event sent
        // again (the service died before it recorded the answer) comes
        // before any later one of the same player.
        var lastAccepted: [String: Int64] = [:]
        var outOfOrder: [String] = []
        for delivery in deliveries where delivery.accepted {
            if let last = lastAccepted[delivery.userID], delivery.eventID < last {
                outOfOrder.append("\(delivery.userID): \(delivery.eventID) after \(last)")
            }
            lastAccepted[delivery.userID] = delivery.eventID
        }
        #expect(outOfOrder.isEmpty, "\(outOfOrder.prefix(5))")

        // The feed from cursor 0: exactly the committed events, adding up to the balances.
        let feed = try driver.readFeed()
        #expect(feed.map(\.id) == committed.map(\.id))
        var sums: [String: Int64] = [:]
        for event in feed { sums[event.userID, default: 0] += event.amount }
        let balances = try rig.rows("SELECT user_id, balance::text FROM wallet.wallets")
        for row in balances {
            #expect(sums[row[0]] == Int64(row[1]), "\(row[0]): events add up to \(sums[row[0]] ?? 0), balance \(row[1])")
        }
        let check = try rig.walletCommand(["check", "--full"])
        #expect(check.status == 0, "\(check.output)\(check.error)")
    }

}

/// Polls `done` every 50 ms for at most `seconds` (the webhook tests wait with it).
@discardableResult
func waitUntil(_ seconds: Double, _ done: () throws -> Bool) rethrows -> Bool {
    let deadline = Date().addingTimeInterval(seconds)
    while Date() < deadline {
        if try done() { return true }
        Thread.sleep(forTimeInterval: 0.05)
    }
    return try done()
}

/// `wallet serve` with both stores' fakes, a webhook endpoint at a receiver,
/// and the keys the driver uses, on a cluster of its own.
final class AcceptanceRig {
    let cluster: LocalCluster
    let url: String
    let apple: FakeAppStore
    let rootFile: String
    let google: FakeGooglePlay
    let certs: FakeGoogleCerts
    let directory: String
    let receiver: WebhookReceiver
    let environment: [String: String]
    let appKey: String
    let gameKey: String
    let feedKey: String
    private(set) var server: ServerProcess
    private(set) var port: UInt16

    init() throws {
        cluster = try TestCluster.start(name: "events")
        url = try ChaosRun.migratedWalletDatabase(on: cluster)
        apple = try FakeAppStore()
        rootFile = try RefundNotifications.writeRoot(of: apple)
        google = try FakeGooglePlay()
        certs = try FakeGoogleCerts()
        directory = NSTemporaryDirectory() + "wallet-events-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        try google.serviceAccountJSON().write(toFile: directory + "/service-account.json", atomically: true, encoding: .utf8)
        receiver = try WebhookReceiver(secret: EventDeliveryAcceptanceTests.secret, lifetimeSeconds: 600)
        environment = ChaosRun.walletEnvironment([
            "WALLET_DATABASE_URL": url,
            "WALLET_LISTEN": "127.0.0.1:0",
            "WALLET_LOG_LEVEL": "error",
            "WALLET_CREDIT_VERIFICATION": "caller,appstore-jws,googleplay",
            "WALLET_APPLE_BUNDLE_ID": FakeAppStore.bundleID,
            "WALLET_APPLE_ENVIRONMENTS": "Sandbox",
            "WALLET_APPLE_ROOT_CERTS": rootFile,
            "WALLET_GOOGLE_SERVICE_ACCOUNT_FILE": directory + "/service-account.json",
            "WALLET_GOOGLE_PACKAGE_NAME": google.packageName,
            "WALLET_GOOGLE_API_URL": google.apiURL.absoluteString,
            "WALLET_GOOGLE_API_TIMEOUT_SECONDS": "2",
            "WALLET_GOOGLE_PUSH_JWKS_URL": certs.url.absoluteString,
            "WALLET_GOOGLE_PUSH_AUDIENCE": FakeGoogleCerts.defaultAudience,
            "WALLET_GOOGLE_PUSH_SERVICE_ACCOUNT": FakeGoogleCerts.defaultEmail,
            "WALLET_GOOGLE_VOIDED_POLL_MINUTES": "0",
            "WALLET_WEBHOOKS_ALLOW_HTTP": "true",
            "WALLET_WEBHOOKS_TIMEOUT_SECONDS": "1",
            "WALLET_WEBHOOKS_FIRST_RETRY_SECONDS": "1",
        ])
        appKey = try ChaosRun.walletCommand(["keys", "create", "--name", "app-backend", "--scopes", "credit,read"],
                                            databaseURL: url).lastLine
        gameKey = try ChaosRun.walletCommand(["keys", "create", "--name", "game-server", "--scopes", "debit,read"],
                                             databaseURL: url).lastLine
        feedKey = try ChaosRun.walletCommand(["keys", "create", "--name", "game-events", "--scopes", "events"],
                                             databaseURL: url).lastLine
        let secretFile = directory + "/webhook.secret"
        try Data(EventDeliveryAcceptanceTests.secret).write(to: URL(fileURLWithPath: secretFile))
        let added = try runProcess([CommandLineTests.walletBinary, "webhooks", "add", "--url", receiver.url,
                                    "--events", "*", "--secret-file", secretFile], environment: environment)
        guard added.status == 0, added.output.hasSuffix("id=1\n") else {
            throw AcceptanceError.setup("wallet webhooks add: \(added.status) \(added.output) \(added.error)")
        }
        (server, port) = try Self.start(environment)
    }

    enum AcceptanceError: Error {
        case setup(String)
        case gaveUp(String)
    }

    private static func start(_ environment: [String: String]) throws -> (ServerProcess, UInt16) {
        let server = try ServerProcess(binary: CommandLineTests.walletBinary, environment: environment)
        do {
            let port = try server.waitForPort()
            guard RefundRaceTests.waitForReady(port: port, seconds: 60) else { throw AcceptanceError.setup("not ready") }
            return (server, port)
        } catch {
            server.kill()
            throw error
        }
    }

    func killAndRestart() throws {
        server.kill()
        (server, port) = try Self.start(environment)
    }

    func stop() {
        server.kill()
        receiver.stop()
        google.stop()
        certs.stop()
        try? FileManager.default.removeItem(atPath: rootFile)
        try? FileManager.default.removeItem(atPath: directory)
        TestCluster.destroy(cluster)
    }

    func rows(_ sql: String) throws -> [[String]] {
        let connection = try Connection(options: .init(conninfo: url))
        defer { connection.close() }
        return try connection.query(PostgresQuery(unsafeSQL: sql)).map { row in row.columns.indices.map { row[$0] ?? "" } }
    }

    struct Event: Equatable {
        var id: Int64
        var userID: String
        var type: String
        var amount: Int64
    }

    func events() throws -> [Event] {
        try rows("SELECT id, user_id, type, amount FROM wallet.events ORDER BY id").map {
            Event(id: Int64($0[0])!, userID: $0[1], type: $0[2], amount: Int64($0[3])!)
        }
    }

    func walletCommand(_ arguments: [String]) throws -> (status: Int32, output: String, error: String) {
        try runProcess([CommandLineTests.walletBinary] + arguments, environment: environment)
    }

    func psql(_ script: String, _ variables: [String: String]) throws -> (status: Int32, output: String, error: String) {
        var arguments = ["psql", "-X", url, "-v", "ON_ERROR_STOP=1"]
        for (name, value) in variables.sorted(by: { $0.key < $1.key }) { arguments += ["-v", "\(name)=\(value)"] }
        return try runProcess(arguments + ["-f", "Scripts/admin/\(script)"])
    }
}

/// The operations: each retried with the same flowNO, key or notification
/// until its answer is definitive, across every fault.
struct AcceptanceDriver {
    let rig: AcceptanceRig
    var counter = 0
    /// Credits by caller that may still be refunded, by flowNO; Google
    /// purchases that may be voided, by token; holds still held.
    var refundable: [String] = []
    var googleCredits: [(token: String, orderID: String)] = []
    var holds: [Int64] = []

    init(rig: AcceptanceRig) {
        self.rig = rig
    }

    mutating func step(_ random: inout SplitMix64) throws {
        counter += 1
        let player = EventDeliveryAcceptanceTests.players.randomElement(using: &random)!
        switch Int.random(in: 0..<100, using: &random) {
        case 0..<22:
            let flowNo = "ev-flow-\(counter)"
            let product = ["guodong600", "guodong1200", "guodong5000"].randomElement(using: &random)!
            try definitive("POST", "/v1/credits", key: rig.appKey,
                           body: #"{"user_id":"\#(player)","flow_no":"\#(flowNo)","product_id":"\#(product)"}"#)
            refundable.append(flowNo)
        case 22..<52:
            try definitive("POST", "/v1/debits", key: rig.gameKey,
                           body: #"{"user_id":"\#(player)","amount":\#(Int.random(in: 1...400, using: &random))}"#,
                           idempotencyKey: "ev-debit-\(counter)")
        case 52..<64:
            let seconds = Bool.random(using: &random) ? 1 : 600
            let answer = try definitive("POST", "/v1/holds", key: rig.gameKey,
                                        body: #"{"user_id":"\#(player)","amount":\#(Int.random(in: 1...200, using: &random)),"expires_in_seconds":\#(seconds)}"#,
                                        idempotencyKey: "ev-hold-\(counter)")
            if seconds == 600, case .number(let digits)? = try? answer.json()["hold"]?["id"], let id = Int64(digits) {
                holds.append(id)
            }
        case 64..<74 where !holds.isEmpty:
            let id = holds.remove(at: Int.random(in: 0..<holds.count, using: &random))
            let action = Bool.random(using: &random) ? "capture" : "release"
            try definitive("POST", "/v1/holds/\(id)/\(action)", key: rig.gameKey, body: nil,
                           idempotencyKey: "ev-\(action)-\(counter)")
        case 74..<80:
            let grant = try rig.psql("grant.sql", ["user_id": player, "amount": String(Int.random(in: 1...500, using: &random)),
                                                   "currency": "coin", "reason": "event test", "operator": "tests"])
            try retryScript(grant, "grant.sql") { try rig.psql("grant.sql", ["user_id": player, "amount": "7",
                                                                             "currency": "coin", "reason": "event test",
                                                                             "operator": "tests"]) }
        case 80..<84 where !refundable.isEmpty:
            let flowNo = refundable.remove(at: Int.random(in: 0..<refundable.count, using: &random))
            let variables = ["flow_no": flowNo, "reason": "chargeback", "operator": "tests"]
            try retryScript(try rig.psql("refund.sql", variables), "refund.sql") { try rig.psql("refund.sql", variables) }
        case 84..<89 where !refundable.isEmpty:
            let flowNo = refundable.remove(at: Int.random(in: 0..<refundable.count, using: &random))
            let body = RefundNotifications.body(apple: rig.apple, type: "REFUND", flowNo: flowNo,
                                                uuid: RefundNotifications.uuid(counter),
                                                signedDateMilliseconds: FakeAppStore.signedDateMilliseconds)
            try definitive("POST", "/v1/appstore/notifications", key: nil, body: body)
        case 89..<95:
            let token = "ev-token-\(counter)"
            let orderID = "GPA.\(counter)-1"
            rig.google.setPurchase(productID: "guodong600", token: token, .purchased(orderId: orderID))
            try definitive("POST", "/v1/credits", key: rig.appKey,
                           body: #"{"user_id":"\#(player)","product_id":"guodong600","google_purchase_token":"\#(token)"}"#)
            googleCredits.append((token, orderID))
        case 95..<100 where !googleCredits.isEmpty:
            let (token, orderID) = googleCredits.remove(at: Int.random(in: 0..<googleCredits.count, using: &random))
            let millis = Int64(Date().timeIntervalSince1970 * 1000)
            rig.google.addVoided(.init(purchaseToken: token, orderId: orderID, voidedTimeMillis: millis))
            let data = #"{"version":"1.0","packageName":"\#(rig.google.packageName)","eventTimeMillis":"\#(millis)","voidedPurchaseNotification":{"purchaseToken":"\#(token)","orderId":"\#(orderID)","productType":2,"refundType":1}}"#
            let body = #"{"message":{"data":"\#(Base64.encode(Array(data.utf8)))","messageId":"m-\#(counter)","message_id":"m-\#(counter)","publishTime":"2026-12-07T10:00:00Z","attributes":{}},"subscription":"projects/p/subscriptions/play","deliveryAttempt":1}"#
            try definitive("POST", "/v1/googleplay/notifications", key: nil, body: body, bearer: rig.certs.token())
        default:
            try definitive("GET", "/v1/wallets/\(player)", key: rig.gameKey, body: nil)
        }
    }

    /// Sends until the answer is not a transient failure: no answer, a
    /// connection that broke, or a 5xx. Every retry is the same request.
    @discardableResult
    func definitive(_ method: String, _ path: String, key: String?, body: String?, idempotencyKey: String? = nil,
                    bearer: String? = nil) throws -> HTTPTestResponse {
        let deadline = Date().addingTimeInterval(90)
        var last = "no attempt"
        while Date() < deadline {
            var headers: [(name: String, value: String)] = []
            if let idempotencyKey { headers.append(("Idempotency-Key", idempotencyKey)) }
            if let bearer { headers.append(("Authorization", "Bearer \(bearer)")) }
            do {
                let answer = try TestService.request(port: rig.port, method, path, key: key, json: body, headers: headers)
                if answer.status < 500 {
                    guard answer.status < 300 || answer.status == 409 || answer.status == 404 else {
                        throw AcceptanceRig.AcceptanceError.gaveUp("\(method) \(path): \(answer.status) \(answer.text)")
                    }
                    return answer
                }
                last = "\(answer.status) \(answer.text)"
            } catch let error as AcceptanceRig.AcceptanceError {
                throw error
            } catch {
                last = "\(error)"
            }
            Thread.sleep(forTimeInterval: 0.2)
        }
        throw AcceptanceRig.AcceptanceError.gaveUp("\(method) \(path): \(last)")
    }

    /// An admin script that failed for want of a database is run again.
    func retryScript(_ first: (status: Int32, output: String, error: String), _ name: String,
                     _ again: () throws -> (status: Int32, output: String, error: String)) throws {
        var result = first
        let deadline = Date().addingTimeInterval(60)
        while result.status == 2 && Date() < deadline {
            Thread.sleep(forTimeInterval: 0.3)
            result = try again()
        }
        guard result.status == 0 else {
            throw AcceptanceRig.AcceptanceError.gaveUp("\(name): \(result.status) \(result.output) \(result.error)")
        }
    }

    /// Writes the due holds' expiry, as the sweeper or the next write would.
    func settleExpiredHolds() throws {
        _ = try rig.rows("SELECT wallet.expire_holds(1000)")
    }

    /// The whole feed from cursor 0, a thousand at a time.
    func readFeed() throws -> [AcceptanceRig.Event] {
        var after: Int64 = 0
        var events: [AcceptanceRig.Event] = []
        while true {
            let page = try definitive("GET", "/v1/events?after=\(after)&limit=1000", key: rig.feedKey, body: nil).json()
            guard case .array(let items)? = page["events"], case .number(let next)? = page["next_after"],
                  let nextAfter = Int64(next) else { throw AcceptanceRig.AcceptanceError.gaveUp("a feed page: \(page)") }
            for item in items {
                guard case .number(let id)? = item["id"], case .string(let user)? = item["user_id"],
                      case .string(let type)? = item["type"], case .number(let amount)? = item["amount"] else { continue }
                events.append(.init(id: Int64(id)!, userID: user, type: type, amount: Int64(amount)!))
            }
            if items.isEmpty { return events }
            after = nextAfter
        }
    }
}
