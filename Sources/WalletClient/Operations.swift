import Foundation

// One method per operation of the API document a game server or an app
// backend calls, named by its operationId. Optional arguments left nil are
// not sent, so the service applies its documented defaults.

extension WalletClient {
    // MARK: Credits (scope `credit`)

    /// `POST /v1/credits`: credits a product bundle for a store transaction,
    /// once per flowNO. The same credit again is a replay (`replayed`, status
    /// 200); the same flowNO for another user, product or quantity is
    /// `FlowNoConflictError`. `flowNo` may be nil only with a Google Play
    /// purchase token, whose order id is then the flowNO. Safe to retry: the
    /// flowNO is the credit's idempotency key.
    public func createCredit(userID: String, flowNo: String?, productID: String, quantity: Int? = nil,
                             amount: Int64? = nil, evidence: PurchaseEvidence? = nil) async throws -> WriteResult<CreditResponse> {
        var body = CreditBody(userID: userID, flowNo: flowNo, productID: productID, quantity: quantity, amount: amount)
        switch evidence {
        case .signedTransaction(let jws): body.signedTransaction = jws
        case .receiptData(let receipt): body.receiptData = receipt
        case .googlePurchaseToken(let token): body.googlePurchaseToken = token
        case nil: break
        }
        return try await write(Call(method: "POST", path: "/v1/credits", body: try Self.json(body)), as: CreditResponse.self)
    }

    /// `GET /v1/credits/{flow_no}`: one credit as it is now (scope `read`).
    public func getCredit(flowNo: String) async throws -> CreditLookupResponse {
        try await read(Call(method: "GET", path: Self.path("v1", "credits", flowNo)))
    }

    /// `GET /v1/wallets/{user_id}/account-tokens`: the tokens to set on the
    /// player's purchases (scope `credit`).
    public func getAccountTokens(userID: String) async throws -> AccountTokens {
        try await read(Call(method: "GET", path: Self.path("v1", "wallets", userID, "account-tokens")))
    }

    // MARK: Debits and grants (scopes `debit`, `grant`)

    /// `POST /v1/debits`: spends from what is available, never below zero.
    /// Throws `InsufficientFundsError` when the available balance is below
    /// `amount` (stored under the key: a retry replays it).
    public func createDebit(userID: String, amount: Int64, currency: String? = nil, reason: String? = nil,
                            metadata: [String: JSONValue]? = nil,
                            idempotencyKey: String? = nil) async throws -> WriteResult<DebitResponse> {
        let body = DebitBody(userID: userID, amount: amount, currency: currency, reason: reason, metadata: metadata)
        return try await write(Call(method: "POST", path: "/v1/debits", body: try Self.json(body),
                                    idempotencyKey: idempotencyKey ?? Self.newIdempotencyKey()), as: DebitResponse.self)
    }

    /// `POST /v1/grants`: gives free coins (a reward), expiring after
    /// `expiresInDays` if given.
    public func createGrant(userID: String, amount: Int64, reason: String, currency: String? = nil,
                            expiresInDays: Int? = nil, idempotencyKey: String? = nil) async throws -> WriteResult<GrantResponse> {
        let body = GrantBody(userID: userID, amount: amount, reason: reason, currency: currency, expiresInDays: expiresInDays)
        return try await write(Call(method: "POST", path: "/v1/grants", body: try Self.json(body),
                                    idempotencyKey: idempotencyKey ?? Self.newIdempotencyKey()), as: GrantResponse.self)
    }

    // MARK: Holds (scope `debit`; reads `read`)

    /// `POST /v1/holds`: reserves `amount` of the available balance for
    /// `expiresInSeconds` (the service's default: 300).
    public func createHold(userID: String, amount: Int64, currency: String? = nil, reason: String? = nil,
                           metadata: [String: JSONValue]? = nil, expiresInSeconds: Int? = nil,
                           idempotencyKey: String? = nil) async throws -> WriteResult<HoldResponse> {
        let body = HoldBody(userID: userID, amount: amount, currency: currency, reason: reason, metadata: metadata,
                            expiresInSeconds: expiresInSeconds)
        return try await write(Call(method: "POST", path: "/v1/holds", body: try Self.json(body),
                                    idempotencyKey: idempotencyKey ?? Self.newIdempotencyKey()), as: HoldResponse.self)
    }

    /// `POST /v1/holds/{id}/capture`: debits `amount` of the hold (all of it
    /// when nil) and releases the rest.
    public func captureHold(id: Int64, amount: Int64? = nil,
                            idempotencyKey: String? = nil) async throws -> WriteResult<HoldActionResponse> {
        try await write(Call(method: "POST", path: Self.path("v1", "holds", String(id), "capture"),
                             body: try Self.json(CaptureBody(amount: amount)),
                             idempotencyKey: idempotencyKey ?? Self.newIdempotencyKey()), as: HoldActionResponse.self)
    }

    /// `POST /v1/holds/{id}/release`: gives the held coins back.
    public func releaseHold(id: Int64, idempotencyKey: String? = nil) async throws -> WriteResult<HoldReleaseResponse> {
        try await write(Call(method: "POST", path: Self.path("v1", "holds", String(id), "release"),
                             body: Data("{}".utf8), idempotencyKey: idempotencyKey ?? Self.newIdempotencyKey()),
                        as: HoldReleaseResponse.self)
    }

    /// `GET /v1/holds/{id}`: one hold as it is now.
    public func getHold(id: Int64) async throws -> HoldLookupResponse {
        try await read(Call(method: "GET", path: Self.path("v1", "holds", String(id))))
    }

    // MARK: Reads (scope `read`)

    /// `GET /v1/wallets/{user_id}`: the balance in every currency, or in `currency` alone.
    public func getWallet(userID: String, currency: String? = nil) async throws -> Wallet {
        try await read(Call(method: "GET", path: Self.path("v1", "wallets", userID), query: Self.query(["currency": currency])))
    }

    /// `GET /v1/wallets/{user_id}/entries`: one page of ledger entries,
    /// newest first. `entries(userID:)` walks them all.
    public func listEntries(userID: String, currency: String? = nil, limit: Int? = nil,
                            cursor: String? = nil) async throws -> EntriesPage {
        try await read(Call(method: "GET", path: Self.path("v1", "wallets", userID, "entries"),
                            query: Self.query(["currency": currency, "limit": limit.map(String.init), "cursor": cursor])))
    }

    /// `GET /v1/wallets/{user_id}/holds`: one page of the holds this key
    /// placed, newest first. `holds(userID:)` walks them all.
    public func listHolds(userID: String, status: HoldFilter? = nil, limit: Int? = nil,
                          cursor: String? = nil) async throws -> HoldsPage {
        try await read(Call(method: "GET", path: Self.path("v1", "wallets", userID, "holds"),
                            query: Self.query(["status": status?.rawValue, "limit": limit.map(String.init), "cursor": cursor])))
    }

    /// `GET /v1/wallets/{user_id}/credits`: one page of the player's
    /// credits, newest first. `credits(userID:)` walks them all.
    public func listCredits(userID: String, limit: Int? = nil, cursor: String? = nil) async throws -> CreditsPage {
        try await read(Call(method: "GET", path: Self.path("v1", "wallets", userID, "credits"),
                            query: Self.query(["limit": limit.map(String.init), "cursor": cursor])))
    }

    // MARK: Events (scope `events`)

    /// `GET /v1/events`: one page of the event feed after `after`. Pass
    /// `nextAfter` back; an empty page means caught up. `events(after:)`
    /// walks the feed.
    public func listEvents(after: Int64? = nil, limit: Int? = nil, userID: String? = nil,
                           type: EventType? = nil) async throws -> EventsPage {
        try await read(Call(method: "GET", path: "/v1/events",
                            query: Self.query(["after": after.map(String.init), "limit": limit.map(String.init),
                                               "user_id": userID, "type": type?.rawValue])))
    }

    // MARK: Operations (no key needed)

    /// `GET /healthz`: whether the process serves HTTP.
    public func getHealth() async throws -> HealthStatus {
        try await read(Call(method: "GET", path: "/healthz"))
    }

    /// `GET /readyz`: whether the service can take wallet requests now.
    public func getReadiness() async throws -> ReadyStatus {
        try await read(Call(method: "GET", path: "/readyz"))
    }

    /// `GET /openapi.json`: the API document the service serves.
    public func getOpenAPIDocument() async throws -> JSONValue {
        try await read(Call(method: "GET", path: "/openapi.json"))
    }

    // MARK: -

    private func read<Value: Decodable & Sendable>(_ call: Call) async throws -> Value {
        try await perform(call, as: Value.self).value
    }

    private func write<Value: Decodable & Sendable>(_ call: Call, as type: Value.Type) async throws -> WriteResult<Value> {
        let answer = try await perform(call, as: type)
        return WriteResult(value: answer.value, status: answer.status, replayed: answer.replayed,
                           idempotencyKey: call.idempotencyKey, requestID: answer.requestID, attempts: answer.attempts)
    }

    /// A fresh key for one call: a random (version 4) UUID, lowercase.
    static func newIdempotencyKey() -> String {
        UUID().uuidString.lowercased()
    }

    private static func query(_ items: KeyValuePairs<String, String?>) -> [(name: String, value: String)] {
        items.compactMap { name, value in value.map { (name, $0) } }
    }

    private static func json(_ body: some Encodable) throws -> Data {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return try encoder.encode(body)
    }
}

// The request bodies, with the document's member names. Nil members are
// left out.

private struct CreditBody: Encodable {
    var userID: String
    var flowNo: String?
    var productID: String
    var quantity: Int?
    var amount: Int64?
    var signedTransaction: String?
    var receiptData: String?
    var googlePurchaseToken: String?

    enum CodingKeys: String, CodingKey {
        case userID = "user_id", flowNo = "flow_no", productID = "product_id", quantity, amount
        case signedTransaction = "signed_transaction", receiptData = "receipt_data"
        case googlePurchaseToken = "google_purchase_token"
    }
}

private struct DebitBody: Encodable {
    var userID: String
    var amount: Int64
    var currency: String?
    var reason: String?
    var metadata: [String: JSONValue]?

    enum CodingKeys: String, CodingKey {
        case userID = "user_id", amount, currency, reason, metadata
    }
}

private struct GrantBody: Encodable {
    var userID: String
    var amount: Int64
    var reason: String
    var currency: String?
    var expiresInDays: Int?

    enum CodingKeys: String, CodingKey {
        case userID = "user_id", amount, reason, currency, expiresInDays = "expires_in_days"
    }
}

private struct HoldBody: Encodable {
    var userID: String
    var amount: Int64
    var currency: String?
    var reason: String?
    var metadata: [String: JSONValue]?
    var expiresInSeconds: Int?

    enum CodingKeys: String, CodingKey {
        case userID = "user_id", amount, currency, reason, metadata, expiresInSeconds = "expires_in_seconds"
    }
}

private struct CaptureBody: Encodable {
    var amount: Int64?
}
