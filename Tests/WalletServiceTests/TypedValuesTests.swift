import Crypto
import CryptoTestSupport
import Foundation
import JSON
import Locking
import Logging
import Postgres
import Testing
import TestSupport
import Timestamps
import WalletCore
@testable import AppStore
@testable import ServiceAPI
@testable import ServiceSupport
@testable import WalletService
import ServiceTestSupport
@testable import WalletStore

/// Outcomes, statuses and actions are enums, read once from the ledger and
/// counted by metrics under their cases; times are `Date`s written one way.
@Suite(.timeLimit(.minutes(3)))
struct TypedValuesTests {
    // MARK: One list each

    /// Each series of a family, as `label="value"` pairs.
    static func series(_ family: String, in exposition: String) -> Set<String> {
        Set(exposition.split(separator: "\n").compactMap { line -> String? in
            guard line.hasPrefix(family + "{"), let close = line.firstIndex(of: "}") else { return nil }
            return String(line[line.index(line.startIndex, offsetBy: family.count + 1)..<close])
        })
    }

    static func outcomes(_ values: [String]) -> Set<String> {
        Set(values.map { "outcome=\"\($0)\"" })
    }

    @Test func everyOutcomeEnumsCasesAreItsMetricsLabels() {
        let exposition = Metrics().render(pool: nil, writerQueueDepth: 0)
        #expect(Self.series("wallet_appstore_notifications_total", in: exposition)
            == Self.outcomes(AppStoreNotificationOutcome.allCases.map(\.rawValue) + ["overloaded", "error"])
            .union(VerificationFailure.allCases.map { "outcome=\"refused\",reason=\"\($0.rawValue)\"" }))
        #expect(Self.series("wallet_googleplay_notifications_total", in: exposition)
            == Self.outcomes(GooglePlayVoidOutcome.allCases.map(\.rawValue) + ["recorded", "duplicate"]
                             + Metrics.GoogleNotificationFailure.allCases.map(\.rawValue)))
        #expect(Self.series("wallet_googleplay_voids_total", in: exposition)
            == Self.outcomes(GooglePlayVoidOutcome.allCases.map(\.rawValue) + ["refused", "failed"]))
        // An attempt that leaves its row pending is one to be retried.
        let attempts = ["queued"] + OutboxStatus.allCases.map { $0 == .pending ? "retried" : $0.rawValue }
        #expect(Self.series("wallet_appstore_consumption_total", in: exposition) == Self.outcomes(attempts))
        #expect(Self.series("wallet_googleplay_consume_total", in: exposition) == Self.outcomes(attempts))
        #expect(Self.series("wallet_batch_operations_count", in: exposition)
            == Set(BatchOperation.allCases.map { "operation=\"\($0.rawValue)\"" }))
        // The notification enums are the SQL functions' outcomes: every
        // outcome the notifications metric names is one an answer decodes to.
        #expect(GooglePlayNotificationOutcome.allCases.count == GooglePlayVoidOutcome.allCases.count + 2)
        for outcome in GooglePlayNotificationOutcome.allCases {
            #expect(GooglePlayNotificationOutcome(rawValue: outcome.rawValue) == outcome)
        }
    }

    /// The enums' raw values are exactly what the ledger's CHECK
    /// constraints allow: the database and the code keep one set.
    @Test func everyStatusEnumIsTheLedgersCheckConstraint() throws {
        let connection = try Connection(options: try TestDatabase.make())
        defer { connection.close() }
        func allowed(_ table: String, _ column: String) throws -> Set<String> {
            let definitions = try connection.query("""
                SELECT pg_get_constraintdef(c.oid) FROM pg_constraint c
                WHERE c.conrelid = \(table)::regclass AND c.contype = 'c'
                """).map { try $0.decode(String.self, at: 0) }
            // `CHECK ((column = ANY (ARRAY['a'::text, 'b'::text])))`, or `column IN (1, 2)` for numbers.
            let matching = definitions.filter { $0.hasPrefix("CHECK ((\(column) = ANY") || $0.hasPrefix("CHECK ((\(column) = ") }
            guard matching.count == 1, let definition = matching.first else { return [] }
            var values = Set<String>()
            var rest = Substring(definition)
            while let open = rest.firstIndex(of: "'") {
                let after = rest[rest.index(after: open)...]
                guard let close = after.firstIndex(of: "'") else { break }
                values.insert(String(after[..<close]))
                rest = after[after.index(after: close)...]
            }
            if values.isEmpty {
                values = Set(definition.split(whereSeparator: { !$0.isNumber }).map(String.init))
            }
            return values
        }
        func raw<Value: RawRepresentable & CaseIterable>(_ type: Value.Type) -> Set<String> {
            Set(type.allCases.map { "\($0.rawValue)" })
        }
        #expect(try allowed("wallet.credits", "status") == raw(CreditStatus.self))
        #expect(try allowed("wallet.credits", "source") == raw(CreditSource.self))
        #expect(try allowed("wallet.credits", "environment") == raw(PurchaseEnvironment.self))
        #expect(try allowed("wallet.credits", "refunded_by") == raw(Refunder.self))
        #expect(try allowed("wallet.holds", "status") == raw(HoldStatus.self))
        #expect(try allowed("wallet.entries", "kind") == raw(EntryKind.self))
        #expect(try allowed("wallet.outbox", "status") == raw(OutboxStatus.self))
        #expect(try allowed("wallet.outbox", "kind") == raw(OutboxKind.self))
        #expect(try allowed("wallet.googleplay_voids", "source") == raw(GooglePlayVoidSource.self))
        #expect(try allowed("wallet.googleplay_voids", "refund_type") == raw(GooglePlayRefundType.self))
        #expect(try allowed("wallet.googleplay_notifications", "kind") == raw(GooglePlayNotificationKind.self))
        #expect(try allowed("wallet.admin_audit", "action") == raw(AuditAction.self))
        #expect(try allowed("wallet.events", "type") == raw(EventType.self))
        #expect(try allowed("wallet.webhook_deliveries", "status") == raw(WebhookDeliveryStatus.self))
        #expect(try allowed("wallet.appstore_refund_states", "notification_type") == raw(AppleRefundNotification.self))
        // A hold request's kind is not a column; `wallet.hold_many` takes these.
        #expect(raw(HoldAction.self) == ["place", "capture", "release"])
    }

    // MARK: An unknown value is refused

    @Test func aValueNoEnumHasIsADecodingErrorNotADefault() throws {
        func refuses<Value: PostgresDecodable & RawRepresentable & CaseIterable>(_ type: Value.Type) throws
        where Value.RawValue == String {
            for value in type.allCases { #expect(try Value(postgresText: value.rawValue) == value) }
            for text in ["bogus", "", "Credited", " credited", "other"] {
                #expect(throws: PostgresError.self, "\(type) \(text)") { try Value(postgresText: text) }
            }
        }
        try refuses(CreditStatus.self)
        try refuses(HoldStatus.self)
        try refuses(HoldAction.self)
        try refuses(EntryKind.self)
        try refuses(CreditSource.self)
        try refuses(PurchaseEnvironment.self)
        try refuses(RefusalReason.self)
        try refuses(OutboxStatus.self)
        try refuses(OutboxKind.self)
        try refuses(AppStoreNotificationOutcome.self)
        try refuses(GooglePlayVoidOutcome.self)
        try refuses(GooglePlayNotificationOutcome.self)
        try refuses(GooglePlayVoidSource.self)
        try refuses(AuditAction.self)
        try refuses(Refunder.self)
        try refuses(LedgerStore.CreditOutcome.self)
        try refuses(LedgerStore.DebitOutcome.self)
        try refuses(LedgerStore.HoldOutcome.self)
        #expect(throws: PostgresError.self) { try GooglePlayRefundType(postgresText: "3") }
    }

    /// An outcome the notification function answers that the service does
    /// not know fails the request (500, Apple retries), and is not answered
    /// or counted as if it were something else.
    @Test func anUnknownNotificationOutcomeFromTheLedgerFailsTheRequest() throws {
        let apple = try FakeAppStore()
        let rootFile = NSTemporaryDirectory() + "wallet-fake-root-\(UUID().uuidString.prefix(8)).der"
        try Data(apple.root.certificate.derBytes).write(to: URL(fileURLWithPath: rootFile))
        defer { try? FileManager.default.removeItem(atPath: rootFile) }
        let service = try TestService {
            $0.creditVerification = [.appStoreJWS, .caller]
            $0.apple.bundleIDs = [FakeAppStore.bundleID]
            $0.apple.environments = ["Sandbox"]
            $0.apple.rootCertificatePaths = [rootFile]
        }
        defer { service.stop() }
        // A ledger function from a release this build does not know.
        let connection = try Connection(options: service.database)
        defer { connection.close() }
        try connection.execute("""
            CREATE OR REPLACE FUNCTION wallet.apply_appstore_notification(
                p_notification_uuid TEXT, p_notification_type TEXT, p_subtype TEXT, p_environment TEXT,
                p_signed_date TIMESTAMPTZ, p_flow_no TEXT, p_product_type TEXT, p_revocation_type TEXT,
                p_revocation_percentage BIGINT, p_payload JSONB, p_queue_consumption BOOLEAN)
            RETURNS TABLE (outcome TEXT, entry_id BIGINT, consumption_queued BOOLEAN)
            LANGUAGE sql AS $$ SELECT 'escalated'::TEXT, NULL::BIGINT, FALSE $$
            """)
        var notification = FakeAppStore.notification(type: "REFUND_DECLINED")
        notification["notificationUUID"] = "00000000-0000-4000-8000-000000000777"
        let response = try service.request("POST", "/v1/appstore/notifications",
                                           json: #"{"signedPayload":"\#(apple.sign(notification))"}"#)
        #expect(response.status == 500, "\(response.status) \(response.text)")
        #expect(!response.text.contains("escalated"))
        let metrics = try service.request("GET", "/metrics").text
        #expect(metrics.contains(#"wallet_appstore_notifications_total{outcome="error"} 1"#), "\(metrics)")
        #expect(!metrics.contains("escalated") && !metrics.contains(#"outcome="other""#))
    }

    /// A row the console shows with an outcome no enum has fails the page;
    /// it is not shown as if the service knew what it means.
    @Test func anUnknownOutcomeInTheLedgerFailsTheConsolePage() throws {
        let service = try TestService()
        defer { service.stop() }
        #expect(try service.count("""
            WITH n AS (
                INSERT INTO wallet.googleplay_notifications
                    (message_id, kind, package_name, event_time, purchase_token, order_id, flow_no, outcome, payload)
                VALUES ('m-1', 'voided_purchase', 'com.example.game', now(), 'tok-1', 'GPA.1', 'GPA.1', 'escalated', '{}')
                RETURNING 1
            )
            SELECT count(*) FROM n
            """) == 1)
        let browser = try ConsoleTests.browser(service, key: service.adminKey)
        let page = try ConsoleTests.get(service, "/admin/credits/GPA.1", browser)
        #expect(page.status == 500, "\(page.status)")
        #expect(!page.text.contains("escalated"))
    }

    // MARK: Times

    /// Whether `text` is a time as the service writes one.
    static func isRFC3339(_ text: String) -> Bool {
        text.wholeMatch(of: #/\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z/#) != nil
    }

    /// The ledger's own text of a time, to the microsecond.
    static func ledgerTime(_ service: TestService, _ sql: String) throws -> String {
        let connection = try Connection(options: service.database)
        defer { connection.close() }
        return try connection.query(PostgresQuery(unsafeSQL: "SELECT wallet.rfc3339((\(sql)))"))[0].decode(String.self, at: 0)
    }

    static func string(_ value: JSONValue?) -> String? {
        if case .string(let text)? = value { return text }
        return nil
    }

    /// Every time in a new answer is the ledger's own time, written as
    /// `wallet.rfc3339` writes it; a replay is the same bytes.
    @Test func newAnswersCarryTheLedgersTimesToTheMicrosecond() throws {
        let service = try TestService()
        defer { service.stop() }
        let credit = try service.credit(userID: "timed", flowNo: "4000000001")
        #expect(credit.status == 201)
        let creditedAt = try #require(Self.string(try credit.json()["credit"]?["created_at"]))
        #expect(Self.isRFC3339(creditedAt))
        #expect(creditedAt == (try Self.ledgerTime(service, "SELECT created_at FROM wallet.credits WHERE flow_no = '4000000001'")))
        #expect(try service.credit(userID: "timed", flowNo: "4000000001").body == credit.body)
        let read = try service.request("GET", "/v1/credits/4000000001", key: service.appBackendKey)
        #expect(Self.string(try read.json()["credit"]?["created_at"]) == creditedAt)

        let debit = try service.debit(userID: "timed", amount: 7, idempotencyKey: "timed-debit")
        #expect(debit.status == 201)
        let debitedAt = try #require(Self.string(try debit.json()["debit"]?["created_at"]))
        let entryID = try #require(try debit.json()["debit"]?["entry_id"]?.integer(as: Int64.self))
        #expect(Self.isRFC3339(debitedAt))
        #expect(debitedAt == (try Self.ledgerTime(service, "SELECT created_at FROM wallet.entries WHERE id = \(entryID)")))
        #expect(try service.debit(userID: "timed", amount: 7, idempotencyKey: "timed-debit").body == debit.body)
        let entries = try service.request("GET", "/v1/wallets/timed/entries?limit=1", key: service.gameServerKey)
        #expect(Self.string(try entries.json()["entries"]?.arrayValue?.first?["created_at"]) == debitedAt)

        func hold(_ key: String) throws -> HTTPTestResponse {
            try service.request("POST", "/v1/holds", key: service.gameServerKey,
                                json: #"{"user_id":"timed","amount":5,"expires_in_seconds":600}"#,
                                headers: [("Idempotency-Key", key)])
        }
        func act(_ id: Int64, _ action: HoldAction, _ key: String) throws -> HTTPTestResponse {
            try service.request("POST", "/v1/holds/\(id)/\(action.rawValue)", key: service.gameServerKey, json: "{}",
                                headers: [("Idempotency-Key", key)])
        }
        let placed = try hold("timed-hold-1")
        #expect(placed.status == 201)
        let first = try #require(try placed.json()["hold"]?["id"]?.integer(as: Int64.self))
        for (field, column) in [("created_at", "created_at"), ("expires_at", "expires_at")] {
            let written = try #require(Self.string(try placed.json()["hold"]?[field]))
            #expect(Self.isRFC3339(written))
            #expect(written == (try Self.ledgerTime(service, "SELECT \(column) FROM wallet.holds WHERE id = \(first)")))
        }
        let captured = try act(first, .capture, "timed-capture")
        #expect(captured.status == 201)
        let capturedAt = try #require(Self.string(try captured.json()["hold"]?["captured_at"]))
        #expect(capturedAt == (try Self.ledgerTime(service, "SELECT captured_at FROM wallet.holds WHERE id = \(first)")))
        #expect(Self.string(try captured.json()["debit"]?["created_at"]) == capturedAt)
        #expect(try act(first, .capture, "timed-capture").body == captured.body)

        let second = try #require(try hold("timed-hold-2").json()["hold"]?["id"]?.integer(as: Int64.self))
        let released = try act(second, .release, "timed-release")
        #expect(released.status == 200)
        let releasedAt = try #require(Self.string(try released.json()["hold"]?["released_at"]))
        #expect(releasedAt == (try Self.ledgerTime(service, "SELECT released_at FROM wallet.holds WHERE id = \(second)")))
        #expect(try act(second, .release, "timed-release").body == released.body)
        #expect(try service.violations().isEmpty)
    }

    /// A log line's time is written the same way: microseconds, UTC.
    @Test func logLinesCarryTheOneTimeFormat() throws {
        let lines = Locked<[String]>([])
        let logger = Logger(label: "test", sink: Logger.Sink { line in lines.withLock { $0.append(line) } })
        let before = Date()
        logger.info("a line")
        let line = try #require(lines.withLock { $0 }.first)
        let written = try #require(Self.string(try JSONParser.parse(Array(line.utf8))["ts"]))
        #expect(Self.isRFC3339(written), "\(written)")
        #expect(written >= before.addingTimeInterval(-0.001).rfc3339 && written <= Date().addingTimeInterval(0.001).rfc3339)
    }
}
