/// Response bodies built here, as the API documents them (see openapi.json).
/// Amounts and ids are JSON integers; timestamps are RFC 3339 UTC strings.
/// Credits and debits are answered with the JSON the ledger functions
/// return and store (see StoredJSON).

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
