public import Foundation
public import Postgres
public import WalletCore

/// The service's SQL, in one place. Handlers never build SQL; they call
/// these methods, which call the `wallet.*` functions the admin scripts
/// share. Every value travels as a bind parameter.
/// One wallet's balance: what it holds, and what its active holds (those
/// not past their time) keep from being spent.
public struct WalletBalance: Sendable, Equatable {
    public var currency: String
    public var balance: Int64
    public var held: Int64
    /// Coins past their lot's expiry that no hold needs, not yet taken out
    /// of the balance by an `expire` entry: they are not available.
    public var expired: Int64
    public var available: Int64 { balance - held - expired }
    /// What the wallet's lots hold, bought (paid) and not (free): with the
    /// debt, `paid + free - debt == balance`.
    public var paid: Int64
    public var free: Int64
    /// What a refund or an allowed revoke took beyond every lot: the
    /// balance below zero.
    public var debt: Int64 { max(0, -balance) }
    /// The coins that expire next (every lot with the soonest expiry still
    /// to come), and when; nil when none will.
    public var nextExpiry: NextExpiry?

    public struct NextExpiry: Sendable, Equatable {
        public var amount: Int64
        public var at: Date
    }

    public init(currency: String, balance: Int64, held: Int64, expired: Int64 = 0, paid: Int64 = 0, free: Int64 = 0,
                nextExpiry: NextExpiry? = nil) {
        self.currency = currency
        self.balance = balance
        self.held = held
        self.expired = expired
        self.paid = paid
        self.free = free
        self.nextExpiry = nextExpiry
    }
}

public struct LedgerStore: Sendable {
    // MARK: Credits

    public struct CreditOperation: Sendable {
        public var client: String
        public var flowNo: FlowNumber
        public var userID: UserID
        public var productID: ProductID
        public var quantity: Quantity
        /// The amount the caller claimed, if it sent one; checked, never used.
        public var claimedAmount: Int64?
        public var source: CreditSource
        public var environment: PurchaseEnvironment?
        /// A Google Play purchase's token: credited once, and consumed.
        public var purchaseToken: String?

        public init(client: String, flowNo: FlowNumber, userID: UserID, productID: ProductID, quantity: Quantity,
                    claimedAmount: Int64?, source: CreditSource, environment: PurchaseEnvironment?,
                    purchaseToken: String? = nil) {
            self.purchaseToken = purchaseToken
            self.client = client
            self.flowNo = flowNo
            self.userID = userID
            self.productID = productID
            self.quantity = quantity
            self.claimedAmount = claimedAmount
            self.source = source
            self.environment = environment
        }
    }

    public enum CreditOutcome: String, Sendable, CaseIterable, PostgresDecodable {
        case credited, replayed
        case flowNoConflict = "flow_no_conflict"
        case unknownProduct = "unknown_product"
        case amountMismatch = "amount_mismatch"
        case revoked
    }

    /// A credit as it stands, with the flowNO, user, product and quantity
    /// its request named.
    public struct CreditState: Sendable, Equatable {
        public var currency: String
        public var amount: Int64
        public var status: CreditStatus
        public var entryID: Int64
        public var createdAt: Date
    }

    public struct CreditResult: Sendable {
        public var outcome: CreditOutcome
        /// For `credited` and `replayed`: the credit, and its wallet's balance.
        public var credit: CreditState?
        public var balance: Int64?
        /// With `balance`: what the wallet's active holds keep.
        public var held: Int64?
        /// For `amountMismatch`: catalog amount × quantity.
        public var expectedAmount: Int64?
    }

    static func credit(_ operations: [CreditOperation], on connection: Connection) throws -> [CreditResult] {
        // One `wallet.credit_operation` each, its fields in the type's order.
        let records = operations.map {
            PostgresRecord([$0.client, $0.flowNo.rawValue, $0.userID.rawValue, $0.productID.rawValue,
                            Int32($0.quantity.value), $0.claimedAmount, $0.source, $0.environment,
                            $0.purchaseToken])
        }
        let rows = try connection.prepared("""
            SELECT outcome, currency, amount, status, entry_id, created_at, balance, expected_amount, held
            FROM wallet.credit_many(\(records)::wallet.credit_operation[])
            """)
        guard rows.count == operations.count else { throw StoreError.unexpectedRowCount(rows.count, operations.count) }
        return try rows.map { row in
            let outcome = try row.decode(CreditOutcome.self, at: 0)
            var credit: CreditState?
            if outcome == .credited || outcome == .replayed {
                credit = CreditState(currency: try row.decode(String.self, at: 1), amount: try row.decode(Int64.self, at: 2),
                                     status: try row.decode(CreditStatus.self, at: 3),
                                     entryID: try row.decode(Int64.self, at: 4), createdAt: try row.decode(Date.self, at: 5))
            }
            return CreditResult(outcome: outcome, credit: credit, balance: try row.decodeIfPresent(Int64.self, at: 6),
                                held: try row.decodeIfPresent(Int64.self, at: 8),
                                expectedAmount: try row.decodeIfPresent(Int64.self, at: 7))
        }
    }

    // MARK: Debits

    public struct DebitOperation: Sendable {
        public var client: String
        public var key: IdempotencyKey
        public var requestHash: [UInt8]
        public var userID: UserID
        public var currency: Currency
        public var amount: Amount
        public var reason: String?
        /// Canonical JSON text of the caller's metadata object.
        public var metadata: String?
        public var requestID: String

        public init(client: String, key: IdempotencyKey, requestHash: [UInt8], userID: UserID, currency: Currency,
                    amount: Amount, reason: String?, metadata: String?, requestID: String) {
            self.client = client
            self.key = key
            self.requestHash = requestHash
            self.userID = userID
            self.currency = currency
            self.amount = amount
            self.reason = reason
            self.metadata = metadata
            self.requestID = requestID
        }
    }

    public enum DebitOutcome: String, Sendable, CaseIterable, PostgresDecodable {
        case debited
        case insufficientFunds = "insufficient_funds"
        case idempotencyKeyReused = "idempotency_key_reused"
        case unknownCurrency = "unknown_currency"
    }

    public struct DebitResult: Sendable {
        public var outcome: DebitOutcome
        /// True when the answer was stored by an earlier request with the same key.
        public var replayed: Bool
        /// For `debited`: the ledger entry and when it was written.
        public var entryID: Int64?
        public var createdAt: Date?
        /// For `debited`: the balance after it; for `insufficientFunds`: the
        /// balance that was too low.
        public var balance: Int64?
        /// With `balance`: what the wallet's active holds kept then.
        public var held: Int64?
        /// The request id that first got this answer.
        public var requestID: String?
        /// An answer stored whole by a release before typed results, as
        /// JSON text: replayed as it was first sent.
        public var storedResponse: String?
    }

    static func debit(_ operations: [DebitOperation], on connection: Connection) throws -> [DebitResult] {
        let requests = operations.map {
            PostgresRecord([$0.client, $0.key.rawValue, ByteA($0.requestHash), $0.userID.rawValue, $0.currency.rawValue,
                            $0.amount.value, $0.reason, $0.metadata, $0.requestID])
        }
        let rows = try connection.prepared("""
            SELECT outcome, replayed, entry_id, balance, created_at, request_id, stored_response::text, held
            FROM wallet.debit_many(\(requests)::wallet.debit_request[])
            """)
        guard rows.count == operations.count else { throw StoreError.unexpectedRowCount(rows.count, operations.count) }
        return try rows.map { row in
            DebitResult(outcome: try row.decode(DebitOutcome.self, at: 0), replayed: try row.decode(Bool.self, at: 1),
                        entryID: try row.decodeIfPresent(Int64.self, at: 2),
                        createdAt: try row.decodeIfPresent(Date.self, at: 4),
                        balance: try row.decodeIfPresent(Int64.self, at: 3),
                        held: try row.decodeIfPresent(Int64.self, at: 7),
                        requestID: try row.decodeIfPresent(String.self, at: 5),
                        storedResponse: try row.decodeIfPresent(String.self, at: 6))
        }
    }

    // MARK: Reads

    struct UserBalance {
        var userID: String
        var currency: String
        var balance: Int64
        var held: Int64
        var expired: Int64
        var paid: Int64
        var free: Int64
        var nextExpiry: WalletBalance.NextExpiry?

        var walletBalance: WalletBalance {
            WalletBalance(currency: currency, balance: balance, held: held, expired: expired, paid: paid, free: free,
                          nextExpiry: nextExpiry)
        }
    }

    /// The balances of every user in `userIDs`, one row per wallet, in
    /// currency order within each user, read by `wallet.balances`
    /// (Migrations/functions/22_balances.sql), whose plan stays on the
    /// indexes, JIT-free, whether or not the tables were ever analyzed.
    static func balances(of userIDs: [String], on connection: Connection) throws -> [UserBalance] {
        try connection.prepared("""
            SELECT user_id, currency, balance, held, expired, paid, free, next_amount, next_at
            FROM wallet.balances(\(userIDs)::text[]) ORDER BY user_id, currency
            """).map { row in
            let nextAmount = try row.decodeIfPresent(Int64.self, at: 7)
            let nextAt = try row.decodeIfPresent(Date.self, at: 8)
            return UserBalance(
                userID: try row.decode(String.self, at: 0), currency: try row.decode(String.self, at: 1),
                balance: try row.decode(Int64.self, at: 2), held: try row.decode(Int64.self, at: 3),
                expired: try row.decode(Int64.self, at: 4), paid: try row.decode(Int64.self, at: 5),
                free: try row.decode(Int64.self, at: 6),
                nextExpiry: nextAmount.flatMap { amount in nextAt.map { WalletBalance.NextExpiry(amount: amount, at: $0) } })
        }
    }

    public struct Entry: Sendable, Equatable {
        public var id: Int64
        public var currency: String
        public var amount: Int64
        public var balanceAfter: Int64
        public var kind: EntryKind
        public var reference: String
        public var createdAt: Date
    }

    /// Newest first, entries with an id below `beforeID` when given; one more
    /// than `limit` is read to learn whether another page follows.
    static func entries(of userID: UserID, currency: Currency?, beforeID: Int64?, limit: Int,
                        on connection: Connection) throws -> [Entry] {
        try connection.prepared("""
            SELECT id, currency, amount, balance_after, kind, reference, created_at
            FROM wallet.entries
            WHERE user_id = \(userID.rawValue)
              AND (\(currency?.rawValue)::text IS NULL OR currency = \(currency?.rawValue)::text)
              AND (\(beforeID)::bigint IS NULL OR id < \(beforeID)::bigint)
            ORDER BY id DESC
            LIMIT \(limit + 1)
            """).map { row in
            Entry(id: try row.decode(Int64.self, at: 0), currency: try row.decode(String.self, at: 1),
                  amount: try row.decode(Int64.self, at: 2), balanceAfter: try row.decode(Int64.self, at: 3),
                  kind: try row.decode(EntryKind.self, at: 4), reference: try row.decode(String.self, at: 5),
                  createdAt: try row.decode(Date.self, at: 6))
        }
    }

    /// A credit as the API shows it.
    public struct Credit: Sendable {
        public var flowNo: String
        public var userID: String
        public var productID: String
        public var quantity: Int
        public var state: CreditState
        /// How the purchase was verified (`wallet.credits.source`).
        public var source: String
        /// The store environment the purchase was made in; nil for `caller`.
        public var environment: String?
        /// What refunds took back so far; nil when it is not refunded.
        public var refundedAmount: Int64?
        /// The product's other lines this credit got, in currency order
        /// (`wallet.credit_lines`).
        public var lines: [CreditLine] = []
    }

    /// One of a credit's other lines: coins of another currency the same
    /// purchase bought, and what its refunds took back of them.
    public struct CreditLine: Sendable, Equatable {
        public var currency: String
        public var amount: Int64
        public var refundedAmount: Int64
    }

    /// The other lines of the credits of `flowNos`, by flowNO, in currency
    /// order, read in one query.
    static func creditLines(of flowNos: [String], on connection: Connection) throws -> [String: [CreditLine]] {
        var lines: [String: [CreditLine]] = [:]
        guard !flowNos.isEmpty else { return lines }
        for row in try connection.prepared("""
            SELECT flow_no, currency, amount, refunded_amount FROM wallet.credit_lines
            WHERE flow_no = ANY(\(flowNos)::text[])
            ORDER BY flow_no, currency
            """) {
            lines[try row.decode(String.self, at: 0), default: []].append(
                CreditLine(currency: try row.decode(String.self, at: 1), amount: try row.decode(Int64.self, at: 2),
                           refundedAmount: try row.decode(Int64.self, at: 3)))
        }
        return lines
    }

    /// `credits` with their other lines.
    static func withLines(_ credits: [Credit], on connection: Connection) throws -> [Credit] {
        guard !credits.isEmpty else { return credits }
        let lines = try creditLines(of: credits.map(\.flowNo), on: connection)
        return credits.map { credit in
            var credit = credit
            credit.lines = lines[credit.flowNo] ?? []
            return credit
        }
    }

    /// A player's credits, newest first, below the credit of entry
    /// `beforeEntryID`; `limit` of them and one more, which tells the caller
    /// a next page exists.
    static func credits(of userID: UserID, beforeEntryID: Int64?, limit: Int, on connection: Connection) throws -> [Credit] {
        try withLines(connection.prepared("""
            SELECT \(unsafeSQL: creditColumns) FROM wallet.credits
            WHERE user_id = \(userID.rawValue) AND entry_id < coalesce(\(beforeEntryID)::bigint, 9223372036854775807)
            ORDER BY entry_id DESC
            LIMIT \(limit + 1)::integer
            """).map(credit(_:)), on: connection)
    }

    /// The credit, or nil when the flowNO was never credited.
    static func credit(_ flowNo: FlowNumber, on connection: Connection) throws -> Credit? {
        try credit(connection.prepared("""
            SELECT \(unsafeSQL: creditColumns) FROM wallet.credits WHERE flow_no = \(flowNo.rawValue)
            """)).map { try withLines([$0], on: connection)[0] }
    }

    /// The credit of a Google Play purchase token, or nil.
    static func credit(purchaseToken: String, on connection: Connection) throws -> Credit? {
        try credit(connection.prepared("""
            SELECT \(unsafeSQL: creditColumns) FROM wallet.credits WHERE purchase_token = \(purchaseToken)
            """))
    }

    private static let creditColumns = """
        flow_no, user_id, product_id, quantity, currency, amount, status, entry_id, created_at, source, environment,
        refunded_amount
        """

    /// The one row `creditColumns` selects, if any.
    private static func credit(_ rows: Rows) throws -> Credit? {
        try rows.single.map(credit(_:))
    }

    /// A row `creditColumns` selects.
    private static func credit(_ row: Row) throws -> Credit {
        Credit(flowNo: try row.decode(String.self, at: 0), userID: try row.decode(String.self, at: 1),
               productID: try row.decode(String.self, at: 2), quantity: try row.decode(Int.self, at: 3),
               state: CreditState(currency: try row.decode(String.self, at: 4), amount: try row.decode(Int64.self, at: 5),
                                  status: try row.decode(CreditStatus.self, at: 6),
                                  entryID: try row.decode(Int64.self, at: 7), createdAt: try row.decode(Date.self, at: 8)),
               source: try row.decode(String.self, at: 9), environment: try row.decodeIfPresent(String.self, at: 10),
               refundedAmount: try row.decodeIfPresent(Int64.self, at: 11))
    }

    // MARK: Upkeep

    static func checkInvariants(on connection: Connection) throws -> [InvariantViolation] {
        try connection.query("SELECT invariant, subject, detail FROM wallet.check_invariants()").map {
            InvariantViolation(invariant: try $0.decode(String.self, at: 0), subject: try $0.decode(String.self, at: 1),
                      detail: try $0.decode(String.self, at: 2))
        }
    }

    /// Deletes up to `limit` idempotency records created before `before`.
    static func purgeIdempotencyKeys(olderThanHours hours: Int, limit: Int, on connection: Connection) throws -> Int {
        try connection.prepared("""
            SELECT wallet.purge_idempotency_keys(now() - make_interval(hours => \(hours)), \(limit))
            """)[0].decode(Int.self, at: 0)
    }

    public enum StoreError: Error, CustomStringConvertible {
        case unexpectedRowCount(Int, Int)
        case missingColumn(String)

        public var description: String {
            switch self {
            case .unexpectedRowCount(let got, let expected): "expected \(expected) result rows, got \(got)"
            case .missingColumn(let what): "a result column is NULL for \(what)"
            }
        }
    }
}

// MARK: App Store notifications

extension LedgerStore {
    public struct NotificationRecord: Sendable {
        public var notificationUUID: String
        public var notificationType: String
        public var subtype: String?
        public var environment: String
        public var signedDateMilliseconds: Int64
        public var flowNo: String?
        public var productType: String?
        public var revocationType: String?
        public var revocationPercentage: Int64?
        /// The decoded payload, as JSON text, kept with the record.
        public var payloadJSON: String

        public init(notificationUUID: String, notificationType: String, subtype: String?, environment: String,
                    signedDateMilliseconds: Int64, flowNo: String?, productType: String?, revocationType: String?,
                    revocationPercentage: Int64?, payloadJSON: String) {
            self.notificationUUID = notificationUUID
            self.notificationType = notificationType
            self.subtype = subtype
            self.environment = environment
            self.signedDateMilliseconds = signedDateMilliseconds
            self.flowNo = flowNo
            self.productType = productType
            self.revocationType = revocationType
            self.revocationPercentage = revocationPercentage
            self.payloadJSON = payloadJSON
        }
    }

    /// What applying a notification did: the SQL function's outcome, the
    /// coins a refund entry it wrote took back (0 for anything else), and
    /// whether it queued an answer to Apple's consumption request.
    public struct NotificationApplied: Sendable, Equatable {
        public var outcome: AppStoreNotificationOutcome
        public var refundedCoins: Int64
        public var consumptionQueued: Bool
    }

    /// Applies a verified notification once. With `queueConsumption`, a
    /// CONSUMPTION_REQUEST recorded now also queues its answer to Apple in
    /// the same call, by the rules of `wallet.apply_appstore_notification`
    /// (a consumable, in Production or Sandbox, within Apple's 12 hours),
    /// so the two are kept or lost together.
    static func applyNotification(_ record: NotificationRecord, queueConsumption: Bool,
                                  on connection: Connection) throws -> NotificationApplied {
        let row = try connection.prepared("""
            SELECT outcome, entry_id, consumption_queued FROM wallet.apply_appstore_notification(
                \(record.notificationUUID), \(record.notificationType), \(record.subtype), \(record.environment),
                to_timestamp(\(record.signedDateMilliseconds)::bigint / 1000.0), \(record.flowNo), \(record.productType),
                \(record.revocationType), \(record.revocationPercentage)::bigint, \(record.payloadJSON)::jsonb,
                \(queueConsumption)::boolean)
            """)[0]
        let outcome = try row.decode(AppStoreNotificationOutcome.self, at: 0)
        let queued = try row.decode(Bool.self, at: 2)
        // The entry the function wrote is invisible to the statement that
        // called it (one snapshot): read after it, for refunds only.
        guard let entryID = try row.decodeIfPresent(Int64.self, at: 1) else {
            return NotificationApplied(outcome: outcome, refundedCoins: 0, consumptionQueued: queued)
        }
        let refunded = try connection.prepared(
            "SELECT coalesce(-sum(amount), 0) FROM wallet.entries WHERE id = \(entryID) AND kind = \(literal: EntryKind.refund)")
        return NotificationApplied(outcome: outcome, refundedCoins: try refunded[0].decode(Int64.self, at: 0),
                                   consumptionQueued: queued)
    }
}

extension SQLState {
    /// Raised by credit_many and debit_many when a concurrent transaction
    /// committed one of the batch's flowNOs or keys first; nothing of the
    /// batch is kept, and a retry sees the committed row.
    static let concurrentTake = SQLState("WL008")
}

/// One row of `wallet.check_invariants()`: which rule, on what, and how.
public struct InvariantViolation: Sendable, Equatable {
    public var invariant: String
    public var subject: String
    public var detail: String
}
