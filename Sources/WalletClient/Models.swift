// The response bodies, one type per schema of the API document, with its
// member names. A member the document requires must be present: a missing
// one fails the decoding instead of becoming a default. Members the
// document does not name are ignored, so the service may add some.

/// A wallet's balance in one currency (schema `Balance`).
public struct Balance: Sendable, Hashable, Codable {
    public let userID: String
    public let currency: String
    public let balance: Int64
    /// What the wallet's active holds keep.
    public let held: Int64
    /// `balance` - `held`: what debits and new holds may take.
    public let available: Int64

    enum CodingKeys: String, CodingKey {
        case userID = "user_id", currency, balance, held, available
    }
}

/// The credit of one store transaction, as made (schema `Credit`).
public struct Credit: Sendable, Hashable, Codable {
    public let flowNo: String
    public let userID: String
    public let productID: String
    public let quantity: Int
    public let currency: String
    /// Catalog amount x quantity at the time of the credit.
    public let amount: Int64
    public let status: CreditStatus
    public let entryID: Int64
    public let createdAt: Timestamp

    enum CodingKeys: String, CodingKey {
        case flowNo = "flow_no", userID = "user_id", productID = "product_id", quantity, currency, amount, status
        case entryID = "entry_id", createdAt = "created_at"
    }
}

/// One of the product's other lines a credit got: coins of another currency.
public struct CreditLine: Sendable, Hashable, Codable {
    public let currency: String
    public let amount: Int64
    /// What refunds took back of this line so far.
    public let refundedAmount: Int64

    enum CodingKeys: String, CodingKey {
        case currency, amount, refundedAmount = "refunded_amount"
    }
}

/// A credit as it is now, with how it was verified (schema `CreditRecord`):
/// the members of `Credit`, readable directly (`record.amount`), and four more.
@dynamicMemberLookup
public struct CreditRecord: Sendable, Hashable, Codable {
    public let credit: Credit
    public let source: CreditSource
    /// The store environment (`Production`, `Sandbox`, `Test`, `Promo`); nil when the store named none.
    public let environment: String?
    /// What refunds took back so far; nil when it is not refunded.
    public let refundedAmount: Int64?
    /// The product's other lines this credit got, in currency order; empty for a one-currency product.
    public let lines: [CreditLine]

    public subscript<Value>(dynamicMember keyPath: KeyPath<Credit, Value>) -> Value {
        credit[keyPath: keyPath]
    }

    enum CodingKeys: String, CodingKey {
        case source, environment, refundedAmount = "refunded_amount", lines
    }

    public init(from decoder: any Decoder) throws {
        credit = try Credit(from: decoder)
        let container = try decoder.container(keyedBy: CodingKeys.self)
        source = try container.decode(CreditSource.self, forKey: .source)
        environment = try container.decodeNullable(String.self, forKey: .environment)
        refundedAmount = try container.decodeNullable(Int64.self, forKey: .refundedAmount)
        lines = try container.decode([CreditLine].self, forKey: .lines)
    }

    public func encode(to encoder: any Encoder) throws {
        try credit.encode(to: encoder)
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(source, forKey: .source)
        try container.encodeNullable(environment, forKey: .environment)
        try container.encodeNullable(refundedAmount, forKey: .refundedAmount)
        try container.encode(lines, forKey: .lines)
    }
}

/// `createCredit`'s answer: the credit and the balance right after it (or,
/// on a replay, the current balance).
public struct CreditResponse: Sendable, Hashable, Codable {
    public let credit: Credit
    public let balance: Balance
}

/// `getCredit`'s answer.
public struct CreditLookupResponse: Sendable, Hashable, Codable {
    public let credit: CreditRecord
}

/// One debit (schema `Debit`).
public struct Debit: Sendable, Hashable, Codable {
    /// The same as `entryID`.
    public let id: Int64
    public let userID: String
    public let currency: String
    /// The amount taken, as a positive number.
    public let amount: Int64
    /// Nil when the debit gave none.
    public let reason: String?
    public let entryID: Int64
    public let createdAt: Timestamp

    enum CodingKeys: String, CodingKey {
        case id, userID = "user_id", currency, amount, reason, entryID = "entry_id", createdAt = "created_at"
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        id = try container.decode(Int64.self, forKey: .id)
        userID = try container.decode(String.self, forKey: .userID)
        currency = try container.decode(String.self, forKey: .currency)
        amount = try container.decode(Int64.self, forKey: .amount)
        reason = try container.decodeNullable(String.self, forKey: .reason)
        entryID = try container.decode(Int64.self, forKey: .entryID)
        createdAt = try container.decode(Timestamp.self, forKey: .createdAt)
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(id, forKey: .id)
        try container.encode(userID, forKey: .userID)
        try container.encode(currency, forKey: .currency)
        try container.encode(amount, forKey: .amount)
        try container.encodeNullable(reason, forKey: .reason)
        try container.encode(entryID, forKey: .entryID)
        try container.encode(createdAt, forKey: .createdAt)
    }
}

/// `createDebit`'s answer: the debit and the balance right after it. A
/// replay repeats the first answer as it was.
public struct DebitResponse: Sendable, Hashable, Codable {
    public let debit: Debit
    public let balance: Balance
}

/// One grant of free coins (schema `Grant`).
public struct Grant: Sendable, Hashable, Codable {
    /// The same as `entryID`.
    public let id: Int64
    public let userID: String
    public let currency: String
    public let amount: Int64
    public let reason: String
    /// When the granted coins expire; nil when they never do.
    public let expiresAt: Timestamp?
    public let entryID: Int64
    public let createdAt: Timestamp

    enum CodingKeys: String, CodingKey {
        case id, userID = "user_id", currency, amount, reason, expiresAt = "expires_at", entryID = "entry_id"
        case createdAt = "created_at"
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        id = try container.decode(Int64.self, forKey: .id)
        userID = try container.decode(String.self, forKey: .userID)
        currency = try container.decode(String.self, forKey: .currency)
        amount = try container.decode(Int64.self, forKey: .amount)
        reason = try container.decode(String.self, forKey: .reason)
        expiresAt = try container.decodeNullable(Timestamp.self, forKey: .expiresAt)
        entryID = try container.decode(Int64.self, forKey: .entryID)
        createdAt = try container.decode(Timestamp.self, forKey: .createdAt)
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(id, forKey: .id)
        try container.encode(userID, forKey: .userID)
        try container.encode(currency, forKey: .currency)
        try container.encode(amount, forKey: .amount)
        try container.encode(reason, forKey: .reason)
        try container.encodeNullable(expiresAt, forKey: .expiresAt)
        try container.encode(entryID, forKey: .entryID)
        try container.encode(createdAt, forKey: .createdAt)
    }
}

/// `createGrant`'s answer.
public struct GrantResponse: Sendable, Hashable, Codable {
    public let grant: Grant
    public let balance: Balance
}

/// `getWallet`'s answer: a balance per currency, sorted by currency, `coin` always among them.
public struct Wallet: Sendable, Hashable, Codable {
    public let userID: String
    public let balances: [WalletBalance]

    enum CodingKeys: String, CodingKey {
        case userID = "user_id", balances
    }

    /// The balance in `currency`, if listed.
    public func balance(in currency: String) -> WalletBalance? {
        balances.first { $0.currency == currency }
    }
}

/// One currency of a wallet, with its lots: `balance` = `paid` + `free` - `debt`.
public struct WalletBalance: Sendable, Hashable, Codable {
    public let currency: String
    public let balance: Int64
    public let held: Int64
    public let available: Int64
    /// Coins left of store purchases.
    public let paid: Int64
    /// Coins left of grants.
    public let free: Int64
    /// What a refund or revoke took beyond every lot.
    public let debt: Int64
    /// The coins that expire next; nil when none will.
    public let nextExpiry: Expiry?

    public struct Expiry: Sendable, Hashable, Codable {
        public let amount: Int64
        public let at: Timestamp
    }

    enum CodingKeys: String, CodingKey {
        case currency, balance, held, available, paid, free, debt, nextExpiry = "next_expiry"
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        currency = try container.decode(String.self, forKey: .currency)
        balance = try container.decode(Int64.self, forKey: .balance)
        held = try container.decode(Int64.self, forKey: .held)
        available = try container.decode(Int64.self, forKey: .available)
        paid = try container.decode(Int64.self, forKey: .paid)
        free = try container.decode(Int64.self, forKey: .free)
        debt = try container.decode(Int64.self, forKey: .debt)
        nextExpiry = try container.decodeNullable(Expiry.self, forKey: .nextExpiry)
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(currency, forKey: .currency)
        try container.encode(balance, forKey: .balance)
        try container.encode(held, forKey: .held)
        try container.encode(available, forKey: .available)
        try container.encode(paid, forKey: .paid)
        try container.encode(free, forKey: .free)
        try container.encode(debt, forKey: .debt)
        try container.encodeNullable(nextExpiry, forKey: .nextExpiry)
    }
}

/// One ledger entry (schema `Entry`); entries are never changed.
public struct Entry: Sendable, Hashable, Codable {
    public let id: Int64
    public let currency: String
    /// Signed: positive for what added coins, negative for what took them.
    public let amount: Int64
    public let balanceAfter: Int64
    public let kind: EntryKind
    /// The flowNO of a credit, the Idempotency-Key of a debit or grant, `hold:<id>` of a capture.
    public let reference: String
    public let createdAt: Timestamp

    enum CodingKeys: String, CodingKey {
        case id, currency, amount, balanceAfter = "balance_after", kind, reference, createdAt = "created_at"
    }
}

/// `listEntries`' answer: newest first; `nextCursor` is nil on the last page.
public struct EntriesPage: Sendable, Hashable, Codable {
    public let entries: [Entry]
    public let nextCursor: String?

    enum CodingKeys: String, CodingKey {
        case entries, nextCursor = "next_cursor"
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        entries = try container.decode([Entry].self, forKey: .entries)
        nextCursor = try container.decodeNullable(String.self, forKey: .nextCursor)
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(entries, forKey: .entries)
        try container.encodeNullable(nextCursor, forKey: .nextCursor)
    }
}

/// `listCredits`' answer: newest first; `nextCursor` is nil on the last page.
public struct CreditsPage: Sendable, Hashable, Codable {
    public let credits: [CreditRecord]
    public let nextCursor: String?

    enum CodingKeys: String, CodingKey {
        case credits, nextCursor = "next_cursor"
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        credits = try container.decode([CreditRecord].self, forKey: .credits)
        nextCursor = try container.decodeNullable(String.self, forKey: .nextCursor)
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(credits, forKey: .credits)
        try container.encodeNullable(nextCursor, forKey: .nextCursor)
    }
}

/// The tokens a player's purchases carry, so a store's own report of a
/// purchase names the player (schema `AccountTokens`).
public struct AccountTokens: Sendable, Hashable, Codable {
    public let userID: String
    /// StoreKit's `appAccountToken`; nil when the service has no namespace configured.
    public let appleAppAccountToken: String?
    /// Play Billing's obfuscated account id: the lowercase hex SHA-256 of `userID`.
    public let googleObfuscatedAccountID: String

    enum CodingKeys: String, CodingKey {
        case userID = "user_id", appleAppAccountToken = "apple_app_account_token"
        case googleObfuscatedAccountID = "google_obfuscated_account_id"
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        userID = try container.decode(String.self, forKey: .userID)
        appleAppAccountToken = try container.decodeNullable(String.self, forKey: .appleAppAccountToken)
        googleObfuscatedAccountID = try container.decode(String.self, forKey: .googleObfuscatedAccountID)
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(userID, forKey: .userID)
        try container.encodeNullable(appleAppAccountToken, forKey: .appleAppAccountToken)
        try container.encode(googleObfuscatedAccountID, forKey: .googleObfuscatedAccountID)
    }
}

/// Coins reserved from what is available, to be captured or released
/// (schema `Hold`). The members the document does not require may be absent.
public struct Hold: Sendable, Hashable, Codable {
    public let id: Int64
    public let userID: String
    public let currency: String
    public let amount: Int64
    public let status: HoldStatus
    public let reason: String?
    public let metadata: [String: JSONValue]?
    public let expiresAt: Timestamp
    public let createdAt: Timestamp
    public let capturedAmount: Int64?
    public let capturedAt: Timestamp?
    public let releasedAt: Timestamp?
    public let expiredAt: Timestamp?

    enum CodingKeys: String, CodingKey {
        case id, userID = "user_id", currency, amount, status, reason, metadata, expiresAt = "expires_at"
        case createdAt = "created_at", capturedAmount = "captured_amount", capturedAt = "captured_at"
        case releasedAt = "released_at", expiredAt = "expired_at"
    }
}

/// `listHolds`' answer: newest first; `nextCursor` is nil on the last page.
public struct HoldsPage: Sendable, Hashable, Codable {
    public let holds: [Hold]
    public let nextCursor: String?

    enum CodingKeys: String, CodingKey {
        case holds, nextCursor = "next_cursor"
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        holds = try container.decode([Hold].self, forKey: .holds)
        nextCursor = try container.decodeNullable(String.self, forKey: .nextCursor)
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(holds, forKey: .holds)
        try container.encodeNullable(nextCursor, forKey: .nextCursor)
    }
}

/// `createHold`'s answer (schema `HoldResponse`), and `releaseHold`'s
/// (schema `HoldReleaseResponse`, the same members): the hold and the
/// balance right after.
public struct HoldResponse: Sendable, Hashable, Codable {
    public let hold: Hold
    public let balance: Balance
}

/// `releaseHold`'s answer.
public typealias HoldReleaseResponse = HoldResponse

/// `captureHold`'s answer: the captured hold, its debit and the balance after.
public struct HoldActionResponse: Sendable, Hashable, Codable {
    public let hold: Hold
    public let debit: CapturedDebit
    public let balance: Balance
}

/// The debit a capture made (its ledger reference is `hold:<id>`).
public struct CapturedDebit: Sendable, Hashable, Codable {
    public let id: Int64
    public let entryID: Int64
    public let userID: String
    public let currency: String
    public let amount: Int64
    public let reason: String?
    public let createdAt: Timestamp

    enum CodingKeys: String, CodingKey {
        case id, entryID = "entry_id", userID = "user_id", currency, amount, reason, createdAt = "created_at"
    }
}

/// `getHold`'s answer.
public struct HoldLookupResponse: Sendable, Hashable, Codable {
    public let hold: Hold
}

/// One change to one wallet (schema `Event`). `amount` is what the change
/// added to the balance (negative when it took, 0 for changes of held coins).
public struct Event: Sendable, Hashable, Codable {
    /// The cursor: strictly increasing.
    public let id: Int64
    public let type: EventType
    public let userID: String
    public let currency: String
    public let amount: Int64
    public let balanceAfter: Int64
    public let held: Int64
    public let available: Int64
    /// Nil for a change to held coins only.
    public let entryID: Int64?
    public let holdID: Int64?
    public let flowNo: String?
    public let createdAt: Timestamp
    /// Always `client` and `reference`, and what the type adds.
    public let data: [String: JSONValue]

    enum CodingKeys: String, CodingKey {
        case id, type, userID = "user_id", currency, amount, balanceAfter = "balance_after", held, available
        case entryID = "entry_id", holdID = "hold_id", flowNo = "flow_no", createdAt = "created_at", data
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        id = try container.decode(Int64.self, forKey: .id)
        type = try container.decode(EventType.self, forKey: .type)
        userID = try container.decode(String.self, forKey: .userID)
        currency = try container.decode(String.self, forKey: .currency)
        amount = try container.decode(Int64.self, forKey: .amount)
        balanceAfter = try container.decode(Int64.self, forKey: .balanceAfter)
        held = try container.decode(Int64.self, forKey: .held)
        available = try container.decode(Int64.self, forKey: .available)
        entryID = try container.decodeNullable(Int64.self, forKey: .entryID)
        holdID = try container.decodeNullable(Int64.self, forKey: .holdID)
        flowNo = try container.decodeNullable(String.self, forKey: .flowNo)
        createdAt = try container.decode(Timestamp.self, forKey: .createdAt)
        data = try container.decode([String: JSONValue].self, forKey: .data)
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(id, forKey: .id)
        try container.encode(type, forKey: .type)
        try container.encode(userID, forKey: .userID)
        try container.encode(currency, forKey: .currency)
        try container.encode(amount, forKey: .amount)
        try container.encode(balanceAfter, forKey: .balanceAfter)
        try container.encode(held, forKey: .held)
        try container.encode(available, forKey: .available)
        try container.encodeNullable(entryID, forKey: .entryID)
        try container.encodeNullable(holdID, forKey: .holdID)
        try container.encodeNullable(flowNo, forKey: .flowNo)
        try container.encode(createdAt, forKey: .createdAt)
        try container.encode(data, forKey: .data)
    }
}

/// `listEvents`' answer, in id order. Pass `nextAfter` back as `after`; an
/// empty page means caught up.
public struct EventsPage: Sendable, Hashable, Codable {
    public let events: [Event]
    public let nextAfter: Int64

    enum CodingKeys: String, CodingKey {
        case events, nextAfter = "next_after"
    }
}

/// `getHealth`'s answer: `status` is `ok` whenever the process serves HTTP.
public struct HealthStatus: Sendable, Hashable, Codable {
    public let status: String
}

/// `getReadiness`' answer: `status` is `ready`.
public struct ReadyStatus: Sendable, Hashable, Codable {
    public let status: String
}

/// One invalid field of a `validation_failed` problem.
public struct FieldError: Sendable, Hashable, Codable {
    /// The member, parameter or path segment (`amount`, `limit`, `user_id`; `body` for the whole body).
    public let field: String
    public let message: String
}
