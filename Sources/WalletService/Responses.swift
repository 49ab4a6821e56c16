/// Response bodies, as the API documents them (see openapi.json). Amounts
/// and ids are JSON integers; timestamps are RFC 3339 UTC strings.

struct BalanceJSON: Codable, Equatable {
    var userID: String
    var currency: String
    var balance: Int64

    enum CodingKeys: String, CodingKey {
        case userID = "user_id", currency, balance
    }
}

struct CreditJSON: Codable, Equatable {
    var flowNo: String
    var userID: String
    var productID: String
    var quantity: Int
    var currency: String
    var amount: Int64
    var status: String
    var entryID: Int64
    var createdAt: String

    enum CodingKeys: String, CodingKey {
        case flowNo = "flow_no", userID = "user_id", productID = "product_id", quantity, currency, amount, status
        case entryID = "entry_id", createdAt = "created_at"
    }
}

struct CreditResponse: Codable, Equatable {
    var credit: CreditJSON
    var balance: BalanceJSON
}

struct CreditLookupResponse: Codable, Equatable {
    var credit: CreditJSON
}

struct DebitJSON: Codable, Equatable {
    var id: Int64
    var userID: String
    var currency: String
    var amount: Int64
    var reason: String?
    var entryID: Int64
    var createdAt: String

    enum CodingKeys: String, CodingKey {
        case id, userID = "user_id", currency, amount, reason, entryID = "entry_id", createdAt = "created_at"
    }

    // `reason` is always present, null when the debit gave none.
    func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(id, forKey: .id)
        try container.encode(userID, forKey: .userID)
        try container.encode(currency, forKey: .currency)
        try container.encode(amount, forKey: .amount)
        try container.encode(reason, forKey: .reason)
        try container.encode(entryID, forKey: .entryID)
        try container.encode(createdAt, forKey: .createdAt)
    }
}

struct DebitResponse: Codable, Equatable {
    var debit: DebitJSON
    var balance: BalanceJSON
}

struct WalletResponse: Codable, Equatable {
    struct Balance: Codable, Equatable {
        var currency: String
        var balance: Int64
    }

    var userID: String
    var balances: [Balance]

    enum CodingKeys: String, CodingKey {
        case userID = "user_id", balances
    }
}

struct EntryJSON: Codable, Equatable {
    var id: Int64
    var currency: String
    var amount: Int64
    var balanceAfter: Int64
    var kind: String
    var reference: String
    var createdAt: String

    enum CodingKeys: String, CodingKey {
        case id, currency, amount, balanceAfter = "balance_after", kind, reference, createdAt = "created_at"
    }
}

struct EntriesResponse: Codable, Equatable {
    var entries: [EntryJSON]
    /// Null on the last page.
    var nextCursor: String?

    enum CodingKeys: String, CodingKey {
        case entries, nextCursor = "next_cursor"
    }

    func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(entries, forKey: .entries)
        try container.encode(nextCursor, forKey: .nextCursor)
    }
}

/// Answers from the SQL functions for outcomes that are not successes.
struct OutcomeJSON: Decodable {
    var code: String
    var balance: Int64?
    var expectedAmount: Int64?

    enum CodingKeys: String, CodingKey {
        case code, balance, expectedAmount = "expected_amount"
    }
}

struct StatusJSON: Codable {
    var status: String
}
