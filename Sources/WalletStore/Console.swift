import Crypto
public import Foundation
import Postgres
public import WalletCore

/// What the support console (`/admin`) reads and the little it writes:
/// its sessions, a key's revocation, and refused notifications. Every
/// listing has a limit; pages that can grow page by id.
public struct ConsoleStore: Sendable {
    /// Rows of a paged listing (ledger entries, audit rows) per page.
    public static let pageSize = 50
    /// A user's credits shown, newest first.
    public static let creditsMax = 100
    /// Audit rows and notifications shown on a user's or a credit's page.
    public static let relatedMax = 50
    /// The overview's windows, in days.
    public static let windows = [7, 30, 90]

    // MARK: Sessions

    public struct Session: Sendable, Equatable {
        /// The API key the operator signed in with.
        public var keyName: String
        public var csrfToken: String
    }

    public enum SignIn: Sendable, Equatable {
        /// The new session: the id for the cookie (shown once, stored as its hash).
        case signedIn(sessionID: String, Session)
        case unknownKey
        /// A live key with neither scope that signs in.
        case notConsole(keyName: String)
    }

    /// The scopes that sign in: `console` for support agents, `admin` for
    /// operators.
    public static let signInScopes: [Scope] = [.console, .admin]
    private static var signInScopeNames: [String] { signInScopes.map(\.rawValue) }

    /// A session id or CSRF token: 32 CSPRNG bytes in base64url.
    static func makeToken() -> String { Base64URL.encode(SecureRandom.bytes(count: 32)) }

    static func sessionHash(_ sessionID: String) -> ByteA { ByteA(SHA256.hash(Array(sessionID.utf8))) }

    /// Signs in with an API key's SHA-256: a session of `minutes` when the
    /// key is live and has one of `signInScopes`. Sessions long over are
    /// removed on the way (a few per sign-in, so the table stays small).
    static func signIn(keyHash: [UInt8], minutes: Int, on connection: Connection,
                       writing write: ((Connection) throws -> Void) throws -> Void) throws -> SignIn {
        guard let row = try connection.query("""
            SELECT id, name, scopes && \(signInScopeNames)::text[], key_hash FROM wallet.api_keys
            WHERE key_hash = \(ByteA(keyHash)) AND revoked_at IS NULL
            """).single, constantTimeEquals(try row.decode(ByteA.self, at: 3).bytes, keyHash)
        else { return .unknownKey }
        let name = try row.decode(String.self, at: 1)
        guard try row.decode(Bool.self, at: 2) else { return .notConsole(keyName: name) }
        let sessionID = makeToken()
        let session = Session(keyName: name, csrfToken: makeToken())
        try write { try $0.execute("""
            WITH over AS (
                SELECT id_hash FROM wallet.admin_sessions
                WHERE expires_at < now() - INTERVAL '1 day' ORDER BY expires_at LIMIT 100
            ), removed AS (
                DELETE FROM wallet.admin_sessions s USING over o WHERE s.id_hash = o.id_hash
            )
            INSERT INTO wallet.admin_sessions (id_hash, key_id, csrf_token, expires_at)
            VALUES (\(sessionHash(sessionID)), \(try row.decode(Int64.self, at: 0)), \(session.csrfToken),
                    now() + make_interval(mins => \(minutes)))
            """) }
        return .signedIn(sessionID: sessionID, session)
    }

    /// The live session with this id: not ended, not expired, and its key
    /// still live with a scope that signs in.
    static func session(_ sessionID: String, on connection: Connection) throws -> Session? {
        try connection.prepared("""
            SELECT k.name, s.csrf_token
            FROM wallet.admin_sessions s JOIN wallet.api_keys k ON k.id = s.key_id
            WHERE s.id_hash = \(sessionHash(sessionID)) AND s.ended_at IS NULL AND s.expires_at > now()
              AND k.revoked_at IS NULL AND k.scopes && \(signInScopeNames)::text[]
            """).single.map { Session(keyName: try $0.decode(String.self, at: 0), csrfToken: try $0.decode(String.self, at: 1)) }
    }

    /// The key that signs the console's session cookies: made once, by
    /// whichever instance asks first, then the same for every instance.
    /// Two statements, so the read sees a key another instance committed
    /// while this one's insert waited on it.
    static func cookieKey(on connection: Connection) throws -> ConsoleCookieKey {
        try connection.execute("""
            INSERT INTO wallet.console_cookie_keys (name, key)
            VALUES ('session', \(ByteA(SecureRandom.bytes(count: ConsoleCookieKey.byteCount))))
            ON CONFLICT (name) DO NOTHING
            """)
        let bytes = try connection.query("SELECT key FROM wallet.console_cookie_keys WHERE name = 'session'")[0]
            .decode(ByteA.self, at: 0).bytes
        return ConsoleCookieKey(bytes: bytes)
    }

    static func signOut(_ sessionID: String, on connection: Connection) throws {
        try connection.execute("""
            UPDATE wallet.admin_sessions SET ended_at = now()
            WHERE id_hash = \(sessionHash(sessionID)) AND ended_at IS NULL
            """)
    }

    /// Revokes the live key `name` and ends its sessions, audited under
    /// `operator`; false when no live key has that name.
    static func revokeKey(name: String, operator: String, on connection: Connection) throws -> Bool {
        try connection.query("""
            SELECT wallet.revoke_api_key(\(name), \(`operator`), 'revoked in the console')
            """)[0].decode(Bool.self, at: 0)
    }

    static func recordRefusedNotification(reason: RefusalReason, appleSigned: Bool, refusals: Int,
                                          on connection: Connection) throws {
        try connection.execute("SELECT wallet.record_refused_notification(\(reason), \(appleSigned), \(refusals))")
    }

    // MARK: Overview

    public struct DayTotals: Sendable, Equatable {
        /// `YYYY-MM-DD`, a UTC day (a `date`, as the server writes one).
        public var day: String
        public var credited: Int64
        public var debited: Int64
        public var refunded: Int64
    }

    /// How many of something there were, by a value of its fixed set.
    public struct Count<Name: Sendable & Equatable>: Sendable, Equatable {
        public var name: Name
        public var count: Int64
    }

    public struct WalletRow: Sendable, Equatable {
        public var userID: String
        public var currency: String
        public var balance: Int64
    }

    public struct Refused: Sendable, Equatable {
        public var receivedAt: Date
        public var reason: RefusalReason
        /// The token's signature and chain held: Apple signed what was refused.
        public var appleSigned: Bool
        /// The refusals the row stands for: itself, and of a kind not signed
        /// by Apple the ones of its reason not kept since the previous row.
        public var refusals: Int64
    }

    public struct Overview: Sendable {
        public var days: [DayTotals]
        public var purchases: Int64
        public var refunds: Int64
        public var consumptionRequests: Int64
        public var largestBalances: [WalletRow]
        public var mostNegativeBalances: [WalletRow]
        public var notificationOutcomes: [Count<AppStoreNotificationOutcome>]
        /// Refusals by reason, counting what each row stands for.
        public var refusedReasons: [Count<RefusalReason>]
        /// The newest refused notifications in the window, newest first: at
        /// most 10 Apple signed and 10 not, so junk cannot hide the others.
        public var recentRefused: [Refused]
        public var googleNotificationOutcomes: [Count<GooglePlayNotificationOutcome>]
    }

    /// The last `days` UTC days, today included. Coins credited are the
    /// purchases' credit entries; debited and refunded are the debit and
    /// refund entries, as positive numbers. Grants, revokes and refund
    /// reversals are left out of the chart.
    ///
    /// What grows with the ledger comes from rollups (`wallet.console_totals`
    /// and `wallet.console_balances`, Migrations/functions/20_console_rollups.sql):
    /// entries and purchases per day, and the balance lists, each read with
    /// what the rollup job has not taken yet in one snapshot, so the numbers
    /// are a direct aggregation's. The rest is read over the window through
    /// an index and grows with the stores' traffic in it, not with the
    /// ledger: consumption requests (one per refund request), notifications
    /// (a few per purchase through a store, BRIN on received_at), and
    /// refused notifications (at most 10,000 rows of each kind are kept).
    static func overview(days: Int, on connection: Connection) throws -> Overview {
        let window = "(now() AT TIME ZONE 'UTC')::date - \(days - 1)"
        let start = "((\(window))::timestamp AT TIME ZONE 'UTC')"
        var totals: [String: DayTotals] = [:]
        var purchases: Int64 = 0
        var refunds: Int64 = 0
        let calendar = try connection.query("""
            SELECT d::date FROM generate_series(\(unsafeSQL: window), (now() AT TIME ZONE 'UTC')::date, INTERVAL '1 day') d
            ORDER BY d
            """).map { try $0.decode(String.self, at: 0) }
        for day in calendar { totals[day] = DayTotals(day: day, credited: 0, debited: 0, refunded: 0) }
        let since = calendar.first ?? ""
        for row in try connection.query("""
            SELECT day::text, kind, amount::bigint, entries FROM wallet.console_totals(\(since)::date)
            """) {
            let day = try row.decode(String.self, at: 0)
            let amount = try row.decode(Int64.self, at: 2), entries = try row.decode(Int64.self, at: 3)
            switch try row.decodeIfPresent(EntryKind.self, at: 1) {
            case nil: purchases += entries
            case .credit?: totals[day]?.credited += amount
            case .debit?: totals[day]?.debited -= amount
            case .refund?: totals[day]?.refunded -= amount; refunds += entries
            default: break
            }
        }
        let consumptionRequests = try connection.query("""
            SELECT count(*) FROM wallet.outbox
            WHERE kind = \(literal: OutboxKind.appStoreConsumption) AND created_at >= \(unsafeSQL: start)
            """)[0].decode(Int64.self, at: 0)
        let largest = try balances("largest", on: connection)
        let negative = try balances("negative", on: connection)
        let outcomes: [Count<AppStoreNotificationOutcome>] = try self.counts("""
            SELECT outcome, count(*) FROM wallet.appstore_notifications
            WHERE received_at >= \(unsafeSQL: start) GROUP BY outcome ORDER BY outcome
            """, on: connection)
        let refused: [Count<RefusalReason>] = try self.counts("""
            SELECT reason, sum(refusals)::bigint FROM wallet.appstore_refused_notifications
            WHERE received_at >= \(unsafeSQL: start) GROUP BY reason ORDER BY reason
            """, on: connection)
        let google: [Count<GooglePlayNotificationOutcome>] = try self.counts("""
            SELECT outcome, count(*) FROM wallet.googleplay_notifications
            WHERE received_at >= \(unsafeSQL: start) GROUP BY outcome ORDER BY outcome
            """, on: connection)
        let recent = try connection.query("""
            SELECT received_at, reason, apple_signed, refusals::bigint FROM (
                (SELECT * FROM wallet.appstore_refused_notifications
                 WHERE apple_signed AND received_at >= \(unsafeSQL: start) ORDER BY id DESC LIMIT 10)
                UNION ALL
                (SELECT * FROM wallet.appstore_refused_notifications
                 WHERE NOT apple_signed AND received_at >= \(unsafeSQL: start) ORDER BY id DESC LIMIT 10)
            ) r ORDER BY id DESC
            """).map {
            Refused(receivedAt: try $0.decode(Date.self, at: 0), reason: try $0.decode(RefusalReason.self, at: 1),
                    appleSigned: try $0.decode(Bool.self, at: 2), refusals: try $0.decode(Int64.self, at: 3))
        }
        return Overview(days: calendar.compactMap { totals[$0] }, purchases: purchases, refunds: refunds,
                        consumptionRequests: consumptionRequests,
                        largestBalances: largest, mostNegativeBalances: negative, notificationOutcomes: outcomes,
                        refusedReasons: refused, recentRefused: recent, googleNotificationOutcomes: google)
    }

    /// A balance list of `wallet.console_balances`: `largest` or `negative`.
    private static func balances(_ list: String, on connection: Connection) throws -> [WalletRow] {
        try connection.query("SELECT user_id, currency, balance FROM wallet.console_balances(\(list))").map {
            WalletRow(userID: try $0.decode(String.self, at: 0), currency: try $0.decode(String.self, at: 1),
                      balance: try $0.decode(Int64.self, at: 2))
        }
    }

    private static func counts<Name: PostgresDecodable>(_ query: PostgresQuery, on connection: Connection) throws -> [Count<Name>] {
        try connection.query(query).map { Count(name: try $0.decode(Name.self, at: 0), count: try $0.decode(Int64.self, at: 1)) }
    }

    // MARK: A user

    public struct EntryRow: Sendable, Equatable {
        public var id: Int64
        public var createdAt: Date
        public var currency: String
        public var kind: EntryKind
        public var amount: Int64
        public var balanceAfter: Int64
        public var reference: String
        public var client: String
        /// The entry's metadata as JSON text (a debit's reason and metadata).
        public var metadata: String?

        static let columns = "id, created_at, currency, kind, amount, balance_after, reference, client, metadata::text"

        init(row: Row) throws {
            id = try row.decode(Int64.self, at: 0)
            createdAt = try row.decode(Date.self, at: 1)
            currency = try row.decode(String.self, at: 2)
            kind = try row.decode(EntryKind.self, at: 3)
            amount = try row.decode(Int64.self, at: 4)
            balanceAfter = try row.decode(Int64.self, at: 5)
            reference = try row.decode(String.self, at: 6)
            client = try row.decode(String.self, at: 7)
            metadata = try row.decodeIfPresent(String.self, at: 8)
        }
    }

    public struct CreditRow: Sendable, Equatable {
        public var flowNo: String
        public var userID: String
        public var productID: String
        public var quantity: Int
        public var currency: String
        public var amount: Int64
        public var status: CreditStatus
        public var source: CreditSource
        public var environment: PurchaseEnvironment?
        public var client: String
        public var entryID: Int64
        public var refundedBy: Refunder?
        public var refundedAmount: Int64?
        public var createdAt: Date
        public var updatedAt: Date
    }

    public struct AuditRow: Sendable, Equatable {
        public var id: Int64
        public var createdAt: Date
        public var action: AuditAction
        public var `operator`: String
        public var databaseUser: String
        public var reason: String?
        /// JSON text.
        public var arguments: String
        public var outcome: String
        public var entryIDs: [Int64]
    }

    public struct UserPage: Sendable {
        public var userID: String
        public var balances: [WalletBalance]
        /// Newest first; one more than `pageSize` when another page follows.
        public var entries: [EntryRow]
        public var credits: [CreditRow]
        public var audit: [AuditRow]
        /// The newest `relatedMax` events, newest first.
        public var events: [WalletEvent]
        /// Lots with coins left, soonest expiry first (at most `relatedMax`).
        public var lots: [LotRow]
    }

    /// A lot with coins left, as the player page lists it.
    public struct LotRow: Sendable {
        public var id: Int64
        public var currency: String
        public var source: String
        public var paid: Bool
        public var amount: Int64
        public var remaining: Int64
        public var expiresAt: Date?
        public var flowNo: String?
        public var createdAt: Date
    }

    /// Nil when the user has no wallet and no credit.
    static func user(_ userID: UserID, beforeEntryID: Int64?, on connection: Connection) throws -> UserPage? {
        let balances = try LedgerStore.balances(of: [userID.rawValue], on: connection).map(\.walletBalance)
        let credits = try creditRows("""
            SELECT \(unsafeSQL: creditColumns) FROM wallet.credits
            WHERE user_id = \(userID.rawValue) ORDER BY created_at DESC, flow_no LIMIT \(creditsMax)
            """, on: connection)
        guard !balances.isEmpty || !credits.isEmpty else { return nil }
        let entries = try connection.query("""
            SELECT \(unsafeSQL: EntryRow.columns) FROM wallet.entries
            WHERE user_id = \(userID.rawValue) AND (\(beforeEntryID)::bigint IS NULL OR id < \(beforeEntryID)::bigint)
            ORDER BY id DESC LIMIT \(pageSize + 1)
            """).map(EntryRow.init(row:))
        // Audit rows that name the user, one of the user's credits, or one of the user's holds.
        let audit = try auditRows("""
            SELECT \(unsafeSQL: auditColumns) FROM wallet.admin_audit
            WHERE (arguments ? 'user_id' AND arguments ->> 'user_id' = \(userID.rawValue))
               OR (arguments ? 'flow_no' AND arguments ->> 'flow_no' IN
                       (SELECT flow_no FROM wallet.credits WHERE user_id = \(userID.rawValue)))
               OR (arguments ? 'hold_id' AND arguments ->> 'hold_id' IN
                       (SELECT id::text FROM wallet.holds WHERE user_id = \(userID.rawValue)))
            ORDER BY id DESC LIMIT \(relatedMax)
            """, on: connection)
        let events = try connection.query("""
            SELECT id, type, user_id, currency, amount, balance_after, held, available, entry_id, hold_id, flow_no,
                   created_at, data::text
            FROM wallet.events WHERE user_id = \(userID.rawValue) ORDER BY id DESC LIMIT \(relatedMax)
            """).map { try EventStore.event($0, at: 0) }
        let lots = try connection.query("""
            SELECT id, currency, source, paid, amount, remaining, expires_at, flow_no, created_at FROM wallet.lots
            WHERE user_id = \(userID.rawValue) AND open
            ORDER BY currency, expires_at NULLS LAST, id LIMIT \(relatedMax)
            """).map { row in
            LotRow(id: try row.decode(Int64.self, at: 0), currency: try row.decode(String.self, at: 1),
                   source: try row.decode(String.self, at: 2), paid: try row.decode(Bool.self, at: 3),
                   amount: try row.decode(Int64.self, at: 4), remaining: try row.decode(Int64.self, at: 5),
                   expiresAt: try row.decodeIfPresent(Date.self, at: 6), flowNo: try row.decodeIfPresent(String.self, at: 7),
                   createdAt: try row.decode(Date.self, at: 8))
        }
        return UserPage(userID: userID.rawValue, balances: balances, entries: entries, credits: credits, audit: audit,
                        events: events, lots: lots)
    }

    /// A webhook delivery as the console lists it.
    public struct DeliveryRow: Sendable {
        public var endpointID: Int64
        public var eventID: Int64
        public var userID: String
        public var status: WebhookDeliveryStatus
        public var attempts: Int
        public var lastAttemptAt: Date?
        public var lastStatus: Int?
        public var lastError: String?
    }

    /// The endpoints with their backlog, and the deliveries tried most
    /// recently (newest `relatedMax`).
    public struct UnclaimedRow: Sendable {
        public var store: String
        public var flowNo: String
        public var productID: String
        public var quantity: Int
        public var environment: String
        public var accountToken: String?
        public var receivedAt: Date
    }

    public struct UnclaimedPage: Sendable {
        public var total: Int64
        /// The oldest, at most `relatedMax`.
        public var purchases: [UnclaimedRow]
    }

    static func unclaimed(on connection: Connection) throws -> UnclaimedPage {
        let total = try connection.query("SELECT count(*) FROM wallet.unclaimed_purchases")[0].decode(Int64.self, at: 0)
        let purchases = try connection.query("""
            SELECT store, flow_no, product_id, quantity, environment, account_token, received_at
            FROM wallet.unclaimed_purchases ORDER BY received_at, flow_no LIMIT \(relatedMax)
            """).map { row in
            UnclaimedRow(store: try row.decode(String.self, at: 0), flowNo: try row.decode(String.self, at: 1),
                         productID: try row.decode(String.self, at: 2), quantity: try row.decode(Int.self, at: 3),
                         environment: try row.decode(String.self, at: 4),
                         accountToken: try row.decodeIfPresent(String.self, at: 5),
                         receivedAt: try row.decode(Date.self, at: 6))
        }
        return UnclaimedPage(total: total, purchases: purchases)
    }

    public struct WebhooksPage: Sendable {
        public var endpoints: [WebhookEndpoint]
        public var recent: [DeliveryRow]
    }

    static func webhooks(on connection: Connection) throws -> WebhooksPage {
        let recent = try connection.query("""
            SELECT endpoint_id, event_id, user_id, status, attempts, last_attempt_at, last_status, last_error
            FROM wallet.webhook_deliveries WHERE last_attempt_at IS NOT NULL
            ORDER BY last_attempt_at DESC, event_id DESC LIMIT \(relatedMax)
            """).map { row in
            DeliveryRow(endpointID: try row.decode(Int64.self, at: 0), eventID: try row.decode(Int64.self, at: 1),
                        userID: try row.decode(String.self, at: 2),
                        status: try row.decode(WebhookDeliveryStatus.self, at: 3), attempts: try row.decode(Int.self, at: 4),
                        lastAttemptAt: try row.decodeIfPresent(Date.self, at: 5),
                        lastStatus: try row.decodeIfPresent(Int.self, at: 6),
                        lastError: try row.decodeIfPresent(String.self, at: 7))
        }
        return WebhooksPage(endpoints: try WebhookStore.endpoints(now: Date(), on: connection), recent: recent)
    }

    private static let creditColumns = """
        flow_no, user_id, product_id, quantity, currency, amount, status, source, environment, client,
        entry_id, refunded_by, refunded_amount, created_at, updated_at
        """

    /// `query` selects `creditColumns`.
    private static func creditRows(_ query: PostgresQuery, on connection: Connection) throws -> [CreditRow] {
        try connection.query(query).map {
            CreditRow(flowNo: try $0.decode(String.self, at: 0), userID: try $0.decode(String.self, at: 1),
                      productID: try $0.decode(String.self, at: 2), quantity: try $0.decode(Int.self, at: 3),
                      currency: try $0.decode(String.self, at: 4), amount: try $0.decode(Int64.self, at: 5),
                      status: try $0.decode(CreditStatus.self, at: 6), source: try $0.decode(CreditSource.self, at: 7),
                      environment: try $0.decodeIfPresent(PurchaseEnvironment.self, at: 8),
                      client: try $0.decode(String.self, at: 9), entryID: try $0.decode(Int64.self, at: 10),
                      refundedBy: try $0.decodeIfPresent(Refunder.self, at: 11),
                      refundedAmount: try $0.decodeIfPresent(Int64.self, at: 12),
                      createdAt: try $0.decode(Date.self, at: 13), updatedAt: try $0.decode(Date.self, at: 14))
        }
    }

    private static let auditColumns = """
        id, created_at, action, operator, db_user, reason, arguments::text, outcome,
        array_to_string(entry_ids, ',')
        """

    /// `query` selects `auditColumns`.
    private static func auditRows(_ query: PostgresQuery, on connection: Connection) throws -> [AuditRow] {
        try connection.query(query).map {
            AuditRow(id: try $0.decode(Int64.self, at: 0), createdAt: try $0.decode(Date.self, at: 1),
                     action: try $0.decode(AuditAction.self, at: 2), operator: try $0.decode(String.self, at: 3),
                     databaseUser: try $0.decode(String.self, at: 4), reason: try $0.decodeIfPresent(String.self, at: 5),
                     arguments: try $0.decode(String.self, at: 6), outcome: try $0.decode(String.self, at: 7),
                     entryIDs: try $0.decode(String.self, at: 8).split(separator: ",").compactMap { Int64($0) })
        }
    }

    // MARK: A credit

    public struct NotificationRow: Sendable, Equatable {
        public var notificationUUID: String
        public var type: String
        public var subtype: String?
        public var environment: String
        public var signedAt: Date
        public var receivedAt: Date
        public var outcome: AppStoreNotificationOutcome
        public var entryID: Int64?
    }

    /// A call owed to a store about the flowNO (a consumption answer, a consume).
    public struct OutboxRow: Sendable, Equatable {
        public var kind: OutboxKind
        public var status: OutboxStatus
        public var attempts: Int
        public var lastError: String?
        public var sentAt: Date?
    }

    /// A Google Play real-time developer notification about the flowNO.
    public struct GoogleNotificationRow: Sendable, Equatable {
        public var messageID: String
        public var kind: GooglePlayNotificationKind
        public var eventTime: Date
        public var receivedAt: Date
        public var outcome: GooglePlayNotificationOutcome
        public var entryID: Int64?
    }

    /// A void Google reported for the flowNO's purchase.
    public struct GoogleVoidRow: Sendable, Equatable {
        public var voidedAt: Date
        public var refund: GooglePlayRefundType
        public var voidedQuantity: Int?
        public var source: GooglePlayVoidSource
        public var recordedAt: Date
    }

    public struct CreditPage: Sendable {
        public var flowNo: String
        /// Nil for a flowNO never credited (Apple told of it first).
        public var credit: CreditRow?
        /// The credit's other lines (a product of several currencies).
        public var lines: [LedgerStore.CreditLine]
        /// Apple's decisive refund notification, if any came.
        public var refundState: AppleRefundNotification?
        /// Refunds and their reversals, oldest first.
        public var refunds: [EntryRow]
        public var notifications: [NotificationRow]
        public var googleNotifications: [GoogleNotificationRow]
        public var googleVoids: [GoogleVoidRow]
        public var outbox: [OutboxRow]
        public var audit: [AuditRow]
    }

    /// Nil when the ledger knows nothing of the flowNO: no credit, no App
    /// Store notification.
    static func credit(_ flowNo: FlowNumber, on connection: Connection) throws -> CreditPage? {
        let credit = try creditRows("""
            SELECT \(unsafeSQL: creditColumns) FROM wallet.credits WHERE flow_no = \(flowNo.rawValue)
            """, on: connection).first
        // Apple's decisive refund notification so far, if any (see 0006).
        let refundState = try connection.query("""
            SELECT notification_type FROM wallet.appstore_refund_states WHERE flow_no = \(flowNo.rawValue)
            """).single.map { try $0.decode(AppleRefundNotification.self, at: 0) }
        let refunds = try connection.query("""
            SELECT \(unsafeSQL: EntryRow.columns) FROM wallet.entries
            WHERE reference = \(flowNo.rawValue) AND kind IN (\(literals: [EntryKind.refund, .refundReversal]))
            ORDER BY id LIMIT \(relatedMax)
            """).map(EntryRow.init(row:))
        let notifications = try connection.query("""
            SELECT notification_uuid, notification_type, subtype, environment, signed_date, received_at, outcome, entry_id
            FROM wallet.appstore_notifications WHERE flow_no = \(flowNo.rawValue)
            ORDER BY signed_date, notification_uuid LIMIT \(relatedMax)
            """).map {
            NotificationRow(notificationUUID: try $0.decode(String.self, at: 0), type: try $0.decode(String.self, at: 1),
                            subtype: try $0.decodeIfPresent(String.self, at: 2),
                            environment: try $0.decode(String.self, at: 3), signedAt: try $0.decode(Date.self, at: 4),
                            receivedAt: try $0.decode(Date.self, at: 5),
                            outcome: try $0.decode(AppStoreNotificationOutcome.self, at: 6),
                            entryID: try $0.decodeIfPresent(Int64.self, at: 7))
        }
        let outbox = try connection.query("""
            SELECT kind, status, attempts, last_error, sent_at
            FROM wallet.outbox WHERE flow_no = \(flowNo.rawValue)
            ORDER BY created_at LIMIT \(relatedMax)
            """).map {
            OutboxRow(kind: try $0.decode(OutboxKind.self, at: 0), status: try $0.decode(OutboxStatus.self, at: 1),
                      attempts: try $0.decode(Int.self, at: 2), lastError: try $0.decodeIfPresent(String.self, at: 3),
                      sentAt: try $0.decodeIfPresent(Date.self, at: 4))
        }
        let audit = try auditRows("""
            SELECT \(unsafeSQL: auditColumns) FROM wallet.admin_audit
            WHERE arguments ? 'flow_no' AND arguments ->> 'flow_no' = \(flowNo.rawValue)
            ORDER BY id DESC LIMIT \(relatedMax)
            """, on: connection)
        let googleNotifications = try connection.query("""
            SELECT message_id, kind, event_time, received_at, outcome, entry_id
            FROM wallet.googleplay_notifications WHERE flow_no = \(flowNo.rawValue)
            ORDER BY event_time, message_id LIMIT \(relatedMax)
            """).map {
            GoogleNotificationRow(messageID: try $0.decode(String.self, at: 0),
                                  kind: try $0.decode(GooglePlayNotificationKind.self, at: 1),
                                  eventTime: try $0.decode(Date.self, at: 2), receivedAt: try $0.decode(Date.self, at: 3),
                                  outcome: try $0.decode(GooglePlayNotificationOutcome.self, at: 4),
                                  entryID: try $0.decodeIfPresent(Int64.self, at: 5))
        }
        let googleVoids = try connection.query("""
            SELECT voided_at, refund_type, voided_quantity, source, recorded_at
            FROM wallet.googleplay_voids WHERE flow_no = \(flowNo.rawValue)
            ORDER BY voided_at LIMIT \(relatedMax)
            """).map {
            GoogleVoidRow(voidedAt: try $0.decode(Date.self, at: 0), refund: try $0.decode(GooglePlayRefundType.self, at: 1),
                          voidedQuantity: try $0.decodeIfPresent(Int.self, at: 2),
                          source: try $0.decode(GooglePlayVoidSource.self, at: 3), recordedAt: try $0.decode(Date.self, at: 4))
        }
        guard credit != nil || refundState != nil || !notifications.isEmpty || !googleVoids.isEmpty
            || !googleNotifications.isEmpty else { return nil }
        let lines = try LedgerStore.creditLines(of: [flowNo.rawValue], on: connection)[flowNo.rawValue] ?? []
        return CreditPage(flowNo: flowNo.rawValue, credit: credit, lines: lines, refundState: refundState, refunds: refunds,
                          notifications: notifications, googleNotifications: googleNotifications, googleVoids: googleVoids,
                          outbox: outbox, audit: audit)
    }

    // MARK: Search, audit, keys

    public struct SearchResult: Sendable, Equatable {
        public var isUser: Bool
        public var isCredit: Bool
    }

    /// Whether `text` is a user with a wallet or credit, and whether it is a
    /// flowNO credited or named by an App Store notification.
    static func search(_ text: String, on connection: Connection) throws -> SearchResult {
        let row = try connection.query("""
            SELECT EXISTS (SELECT 1 FROM wallet.wallets WHERE user_id = \(text))
                       OR EXISTS (SELECT 1 FROM wallet.credits WHERE user_id = \(text)),
                   EXISTS (SELECT 1 FROM wallet.credits WHERE flow_no = \(text))
                       OR EXISTS (SELECT 1 FROM wallet.appstore_notifications WHERE flow_no = \(text))
                       OR EXISTS (SELECT 1 FROM wallet.googleplay_voids WHERE flow_no = \(text))
            """)[0]
        return SearchResult(isUser: try row.decode(Bool.self, at: 0), isCredit: try row.decode(Bool.self, at: 1))
    }

    /// Newest first, below `beforeID`; one more than `pageSize` when another page follows.
    static func audit(beforeID: Int64?, on connection: Connection) throws -> [AuditRow] {
        try auditRows("""
            SELECT \(unsafeSQL: auditColumns) FROM wallet.admin_audit
            WHERE (\(beforeID)::bigint IS NULL OR id < \(beforeID)::bigint) ORDER BY id DESC LIMIT \(pageSize + 1)
            """, on: connection)
    }

    static func keys(on connection: Connection) throws -> [APIKeyInfo] {
        try APIKeys.list(on: connection)
    }
}

/// The console's work on one pooled connection, by a deadline; see
/// `Ledger.console(deadline:_:)`.
public struct ConsoleQueries {
    let connection: Connection
    let metrics: any StoreMetrics

    public func signIn(keySecret: String, minutes: Int) throws -> ConsoleStore.SignIn {
        try ConsoleStore.signIn(keyHash: APIKeys.hash(keySecret), minutes: minutes, on: connection, writing: write)
    }

    public func session(_ sessionID: String) throws -> ConsoleStore.Session? {
        try ConsoleStore.session(sessionID, on: connection)
    }

    public func signOut(_ sessionID: String) throws {
        try write { try ConsoleStore.signOut(sessionID, on: $0) }
    }

    public func revokeKey(name: String, operator: String) throws -> Bool {
        try write { try ConsoleStore.revokeKey(name: name, operator: `operator`, on: $0) }
    }

    /// A console write: one statement, its own transaction with its
    /// settings, on the page's connection. Its failure is a write's
    /// (`outcome_unknown` once sent), never run again behind the operator's
    /// back: the page says so, and the operator decides.
    private func write<T>(_ body: (Connection) throws -> T) throws -> T {
        do {
            return try connection.withLocalSettings(body)
        } catch let error as PostgresError {
            metrics.countDatabaseError(error)
            throw StoreFailure.walletError(writing: error) ?? error
        }
    }

    public func overview(days: Int) throws -> ConsoleStore.Overview {
        try ConsoleStore.overview(days: days, on: connection)
    }

    public func user(_ userID: UserID, beforeEntryID: Int64?) throws -> ConsoleStore.UserPage? {
        try ConsoleStore.user(userID, beforeEntryID: beforeEntryID, on: connection)
    }

    public func credit(_ flowNo: FlowNumber) throws -> ConsoleStore.CreditPage? {
        try ConsoleStore.credit(flowNo, on: connection)
    }

    public func search(_ text: String) throws -> ConsoleStore.SearchResult {
        try ConsoleStore.search(text, on: connection)
    }

    public func audit(beforeID: Int64?) throws -> [ConsoleStore.AuditRow] {
        try ConsoleStore.audit(beforeID: beforeID, on: connection)
    }

    public func keys() throws -> [APIKeyInfo] {
        try ConsoleStore.keys(on: connection)
    }

    public func webhooks() throws -> ConsoleStore.WebhooksPage {
        try ConsoleStore.webhooks(on: connection)
    }

    public func unclaimed() throws -> ConsoleStore.UnclaimedPage {
        try ConsoleStore.unclaimed(on: connection)
    }
}

/// The console's cookie-signing key. Its bytes never appear in a
/// description, so logging the value by mistake shows nothing.
public struct ConsoleCookieKey: Sendable, CustomStringConvertible, CustomDebugStringConvertible {
    public static let byteCount = 32
    public let bytes: [UInt8]

    init(bytes: [UInt8]) {
        precondition(bytes.count == Self.byteCount, "the console cookie key is 32 bytes (a CHECK constraint says so)")
        self.bytes = bytes
    }

    public var description: String { "ConsoleCookieKey(redacted)" }
    public var debugDescription: String { description }
}

extension Ledger {
    /// The console's cookie-signing key, made on first use (see
    /// `wallet.console_cookie_keys`).
    public func consoleCookieKey(deadline: ContinuousClock.Instant) throws -> ConsoleCookieKey {
        try writeBounded(.transaction, pool: pool, metrics: metrics, deadline: deadline) { try ConsoleStore.cookieKey(on: $0) }
    }

    /// Runs the console's `body` on one pooled connection by `deadline`.
    /// Failures come out as every read's do (`database_unavailable`).
    public func console<T>(deadline: ContinuousClock.Instant, _ body: (ConsoleQueries) throws -> T) throws -> T {
        try readBounded(pool: pool, metrics: metrics, deadline: deadline) {
            try body(ConsoleQueries(connection: $0, metrics: metrics))
        }
    }

    /// Events the console's rollup job takes in one transaction, at most.
    public static let consoleRollupStepEventsMax = 50_000

    /// One step of the console's rollup job (`wallet.roll_up_console`):
    /// rolls up at most `limit` events past its watermark, keeps the balance
    /// lists, and returns how many events it took: 0 when another
    /// instance's step holds the watermark's row (it has the work in hand).
    public func rollUpConsole(limit: Int = Ledger.consoleRollupStepEventsMax) throws -> Int {
        precondition(limit > 0, "a step takes at least one event")
        return try writeBounded(.statement, pool: pool, metrics: metrics, deadline: .now + .seconds(30)) {
            try $0.query("SELECT wallet.roll_up_console(\(limit))")[0].decode(Int.self, at: 0)
        }
    }

    /// Keeps a row for refused App Store notifications: their reason,
    /// whether Apple signed them, and how many refusals it stands for (the
    /// newest 10,000 of each kind are kept). Best effort: a failure is the
    /// caller's to log.
    public func recordRefusedNotification(reason: RefusalReason, appleSigned: Bool, refusals: Int,
                                          deadline: ContinuousClock.Instant) throws {
        try writeBounded(.statement, pool: pool, metrics: metrics, deadline: deadline) {
            try ConsoleStore.recordRefusedNotification(reason: reason, appleSigned: appleSigned, refusals: refusals, on: $0)
        }
    }
}
