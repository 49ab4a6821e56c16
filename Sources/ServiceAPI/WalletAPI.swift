import Crypto
import Foundation
import HTTPServer
import JSON
import Logging
import ServiceSupport
import WalletCore
import WalletStore

/// The wallet's routes. A handler checks, decodes and validates; the
/// ledger answers reads and moves money through its group commit.
struct WalletAPI: Sendable {
    let ledger: Ledger
    let authenticator: Authenticator
    let credits: CreditVerification
    let blockingWork: BlockingWork
    let metrics: Metrics
    let readiness: Readiness
    let requestTimeoutSeconds: Int
    /// The most one grant gives (WALLET_GRANT_MAX_AMOUNT).
    let grantAmountMax: Int64
    let logger: Logger

    static let entriesLimitDefault = 50
    static let entriesLimitMax = 500

    func register(on router: Router) {
        // Each route's gate authenticates on the headers, before the body is
        // read: a caller without the scope learns so whatever it sent.
        router.add("POST", "/v1/credits", gate: admit(.credit), postCredit)
        router.add("POST", "/v1/debits", gate: admit(.debit), postDebit)
        router.add("POST", "/v1/grants", gate: admit(.grant), postGrant)
        router.add("GET", "/v1/wallets/{user_id}", gate: admit(.read), getWallet)
        router.add("GET", "/v1/wallets/{user_id}/entries", gate: admit(.read), sync: getEntries)
        router.add("GET", "/v1/wallets/{user_id}/account-tokens", gate: admit(.credit), sync: getAccountTokens)
        router.add("GET", "/v1/credits/{flow_no}", gate: admit(.read), sync: getCredit)
        router.add("GET", "/v1/wallets/{user_id}/credits", gate: admit(.read), sync: getCredits)
        registerHolds(on: router)
        registerEvents(on: router)
    }

    // MARK: Credits

    func postCredit(_ request: Request, _ responder: Responder) {
        do {
            let client = client(of: request)
            let body = try decodeBody(CreditBody.self, from: request)
            let deadline = deadline()
            // Refused before any queue takes it, so it was never queued.
            if ledger.groupCommit.isStopping { throw WalletError.shuttingDown }
            if credits.blocks(body) {
                // Asking Apple takes a network round trip: not on a server thread.
                let queued = blockingWork.submit {
                    do {
                        try submitCredit(body, client: client, deadline: deadline, responder: responder)
                    } catch {
                        responder.fail(error)
                    }
                }
                if !queued { throw WalletError.overloaded }
            } else {
                try submitCredit(body, client: client, deadline: deadline, responder: responder)
            }
        } catch {
            responder.fail(error)
        }
    }

    private func submitCredit(_ body: CreditBody, client: APIClient, deadline: ContinuousClock.Instant,
                              responder: Responder) throws {
        let verified = try alreadyCredited(body, deadline: deadline) ?? credits.verify(body)
        let operation = LedgerStore.CreditOperation(
            client: client.name, flowNo: verified.flowNo, userID: body.userID, productID: body.productID,
            quantity: verified.quantity, claimedAmount: body.claimedAmount, source: verified.source,
            environment: verified.environment, purchaseToken: verified.purchaseToken)
        ledger.groupCommit.submit(.credit(operation), deadline: deadline) { result in
            respond(responder) {
                guard case .credit(let credit) = try result.get() else { preconditionFailure("credit answered as debit") }
                return try creditResponse(credit, operation)
            }
        }
    }

    /// For evidence the service looks up with a store (a bare flowNO with
    /// Apple, a purchase token with Google): a purchase already credited is
    /// answered from the ledger (a replay, a conflict or a refusal, as the
    /// credit function decides) without asking the store again.
    private func alreadyCredited(_ body: CreditBody, deadline: ContinuousClock.Instant) throws -> CreditVerification.Verified? {
        switch credits.mode(of: body) {
        case .appStoreAPI:
            guard let flowNo = body.flowNo, let credit = try ledger.credit(flowNo, deadline: deadline),
                  let quantity = body.quantity ?? Quantity(credit.quantity) else { return nil }
            return CreditVerification.Verified(flowNo: flowNo, quantity: quantity, source: .appStoreAPI, environment: nil)
        case .googlePlay:
            guard let token = body.googlePurchaseToken, let credit = try ledger.credit(purchaseToken: token, deadline: deadline),
                  let flowNo = FlowNumber(credit.flowNo), let quantity = body.quantity ?? Quantity(credit.quantity) else {
                return nil
            }
            if let requested = body.flowNo, requested != flowNo {
                throw WalletError.verificationFailed(reason: .transactionMismatch,
                                                     detail: "this purchase token is credited under another flowNO")
            }
            return CreditVerification.Verified(flowNo: flowNo, quantity: quantity, source: .googlePlay, environment: nil,
                                               purchaseToken: token)
        default:
            return nil
        }
    }

    private func creditResponse(_ result: LedgerStore.CreditResult, _ operation: LedgerStore.CreditOperation) throws -> Response {
        switch result.outcome {
        case .credited, .replayed:
            guard let credit = result.credit, let balance = result.balance else {
                throw LedgerStore.StoreError.missingColumn(result.outcome.rawValue)
            }
            let replayed = result.outcome == .replayed
            if !replayed {
                metrics.countCoins(.credited, credit.amount)
                metrics.countCredit(.client)
                // The credit's transaction queued its consume.
                if operation.purchaseToken != nil { metrics.countGoogleConsume(.queued) }
            }
            return .json(ResponseBody.credited(operation, credit, balance: balance, held: result.held ?? 0),
                         status: replayed ? 200 : 201,
                         headers: replayed ? [("Idempotent-Replayed", "true")] : [])
        case .flowNoConflict:
            throw WalletError.flowNoConflict
        case .unknownProduct:
            throw WalletError.unknownProduct(operation.productID.rawValue)
        case .amountMismatch:
            guard let expected = result.expectedAmount else { throw LedgerStore.StoreError.missingColumn("expected_amount") }
            throw WalletError.amountMismatch(expected: expected)
        case .revoked:
            // A Google Play purchase is revoked by Google's void of its token;
            // any other by Apple's refund of its flowNO.
            throw WalletError.verificationFailed(
                reason: .revoked,
                detail: operation.purchaseToken != nil ? "Google Play voided this purchase; it cannot be credited"
                    : "Apple refunded this transaction; it cannot be credited")
        }
    }

    // MARK: Debits

    func postDebit(_ request: Request, _ responder: Responder) {
        do {
            let client = client(of: request)
            let json = try JSONBody.parse(request)
            let key = try idempotencyKey(request)
            guard key.isDebitKey else {
                throw WalletError.idempotencyKeyRequired(
                    detail: "a debit's Idempotency-Key may not begin with hold:, which names the ledger entries of captured holds")
            }
            let body = try DebitBody(json: json)
            let operation = LedgerStore.DebitOperation(
                client: client.name, key: key, requestHash: SHA256.hash(body.canonicalText), userID: body.userID,
                currency: body.currency, amount: body.amount, reason: body.reason,
                metadata: body.metadataText,
                requestID: request.requestID)
            ledger.groupCommit.submit(.debit(operation), deadline: deadline()) { result in
                respond(responder) {
                    guard case .debit(let debit) = try result.get() else { preconditionFailure("debit answered as credit") }
                    return try debitResponse(debit, operation)
                }
            }
        } catch {
            responder.fail(error)
        }
    }

    private func debitResponse(_ result: LedgerStore.DebitResult, _ operation: LedgerStore.DebitOperation) throws -> Response {
        let replayHeaders: [(name: String, value: String)] = result.replayed ? [("Idempotent-Replayed", "true")] : []
        if result.outcome == .debited, let stored = result.storedResponse {
            // Stored whole by an earlier release: replayed as first sent.
            return LegacyReplay.response(stored, headers: replayHeaders)
        }
        switch result.outcome {
        case .debited:
            guard let entryID = result.entryID, let createdAt = result.createdAt, let balance = result.balance else {
                throw LedgerStore.StoreError.missingColumn("debited")
            }
            if !result.replayed { metrics.countCoins(.debited, operation.amount.value) }
            return .json(ResponseBody.debited(operation, entryID: entryID, createdAt: createdAt, balance: balance,
                                              held: result.held ?? 0),
                         status: 201, headers: replayHeaders)
        case .insufficientFunds:
            // Stored under the key, and replayed as first answered, down to
            // the request id it named.
            guard let balance = result.balance else { throw LedgerStore.StoreError.missingColumn("balance") }
            var problem = WalletError.insufficientFunds(balance: balance, available: balance - (result.held ?? 0)).problem
            problem.instance = result.requestID
            problem.headers += replayHeaders
            return .problem(problem)
        case .idempotencyKeyReused:
            throw WalletError.idempotencyKeyReused
        case .unknownCurrency:
            throw WalletError.unknownCurrency(operation.currency.rawValue)
        }
    }

    // MARK: Reads

    func getWallet(_ request: Request, _ responder: Responder) {
        do {
            let userID = try pathUserID(request)
            let only = try requestedCurrency(request)
            ledger.balances(of: userID) { result in
                respond(responder) {
                    var balances = try result.get()
                    let listed = only ?? .coin
                    if let only { balances.removeAll { $0.currency != only.rawValue } }
                    if !balances.contains(where: { $0.currency == listed.rawValue }) {
                        balances.append(WalletBalance(currency: listed.rawValue, balance: 0, held: 0))
                        balances.sort { $0.currency < $1.currency }
                    }
                    return .json(ResponseBody.wallet(userID: userID.rawValue, balances: balances))
                }
            }
        } catch {
            responder.fail(error)
        }
    }

    /// The one currency a balance read asks for, if any: the catalog must
    /// have it.
    func requestedCurrency(_ request: Request) throws -> Currency? {
        guard let text = request.query["currency"], !text.isEmpty else { return nil }
        guard let currency = Currency(text) else {
            throw WalletError.validationFailed([FieldError(field: "currency", message: Currency.rule)])
        }
        guard try ledger.currencyExists(currency) else { throw WalletError.unknownCurrency(currency.rawValue) }
        return currency
    }

    func getEntries(_ request: Request) throws -> Response {
        let userID = try pathUserID(request)
        var errors: [FieldError] = []
        var currency: Currency?
        if let text = request.query["currency"], !text.isEmpty {
            currency = Currency(text)
            if currency == nil { errors.append(FieldError(field: "currency", message: Currency.rule)) }
        }
        let paging = Paging(request, kind: "entries", errors: &errors)
        if !errors.isEmpty { throw WalletError.validationFailed(errors) }
        let rows = try ledger.entries(of: userID, currency: currency, beforeID: paging.beforeID, limit: paging.limit)
        let (page, next) = paging.page(rows, id: \.id)
        return .json(ResponseBody.entries(page, nextCursor: next))
    }

    /// `GET /v1/wallets/{user_id}/credits`: the player's credits, newest
    /// first, as `GET /v1/credits/{flow_no}` shows each.
    func getCredits(_ request: Request) throws -> Response {
        let userID = try pathUserID(request)
        var errors: [FieldError] = []
        let paging = Paging(request, kind: "credits", errors: &errors)
        if !errors.isEmpty { throw WalletError.validationFailed(errors) }
        let rows = try ledger.credits(of: userID, beforeEntryID: paging.beforeID, limit: paging.limit)
        let (page, next) = paging.page(rows, id: \.state.entryID)
        return .json(["credits": .array(page.map(ResponseBody.creditRecord)),
                      "next_cursor": next.map(JSONValue.string) ?? .null])
    }

    func getCredit(_ request: Request) throws -> Response {
        guard let flowNo = FlowNumber(request.pathParameters["flow_no"] ?? "") else {
            throw WalletError.validationFailed([FieldError(field: "flow_no", message: FlowNumber.rule)])
        }
        guard let credit = try ledger.credit(flowNo) else {
            throw WalletError.notFound(detail: "no credit for this flowNO")
        }
        return .json(["credit": ResponseBody.creditRecord(credit)])
    }

    // MARK: Shared steps, in the order the API documents

    /// Authenticates the caller and checks the route's scope.
    func admit(_ scope: Scope) -> Gate {
        { [authenticator, readiness] head in
            // Until the schema is in place nothing here can be answered.
            guard readiness.isSchemaReady else { throw WalletError.databaseUnavailable }
            let client = try authenticator.client(authorization: head.headers["authorization"])
            guard client.allows(scope) else { throw WalletError.forbidden(required: scope) }
            return client
        }
    }

    func client(of request: Request) -> APIClient {
        guard let client = request.admission as? APIClient else {
            preconditionFailure("a wallet route ran without its gate")
        }
        return client
    }


    func idempotencyKey(_ request: Request) throws -> IdempotencyKey {
        guard let text = request.headers["idempotency-key"] else {
            throw WalletError.idempotencyKeyRequired(detail: "send an Idempotency-Key header with every debit, hold operation and grant")
        }
        guard let key = IdempotencyKey(text) else {
            throw WalletError.idempotencyKeyRequired(detail: "the Idempotency-Key must be 1-255 printable ASCII characters")
        }
        return key
    }

    private func decodeBody<T: RequestBody>(_ type: T.Type, from request: Request) throws -> T {
        try T(json: try JSONBody.parse(request))
    }

    func pathUserID(_ request: Request) throws -> UserID {
        guard let userID = UserID(request.pathParameters["user_id"] ?? "") else {
            throw WalletError.validationFailed([FieldError(field: "user_id", message: UserID.rule)])
        }
        return userID
    }

    func deadline() -> ContinuousClock.Instant {
        .now + .seconds(requestTimeoutSeconds)
    }


    func respond(_ responder: Responder, _ body: () throws -> Response) {
        do {
            responder.send(try body())
        } catch {
            responder.fail(error)
        }
    }
}

/// Opaque page cursors for entry listings.
/// A list's page: `limit` (1-500, 50 by default) and the opaque `cursor`
/// of the page before, which names the last id shown and what it lists
/// (a cursor of one list is refused by another).
struct Paging {
    let kind: String
    var limit = WalletAPI.entriesLimitDefault
    var beforeID: Int64?

    init(_ request: Request, kind: String, errors: inout [FieldError]) {
        self.kind = kind
        if let text = request.query["limit"] {
            if let value = Int(text), (1...WalletAPI.entriesLimitMax).contains(value) {
                limit = value
            } else {
                errors.append(FieldError(field: "limit", message: "must be an integer from 1 to \(WalletAPI.entriesLimitMax)"))
            }
        }
        if let text = request.query["cursor"], !text.isEmpty {
            beforeID = Self.decode(text, kind: kind)
            if beforeID == nil { errors.append(FieldError(field: "cursor", message: "is not a cursor this API gave out")) }
        }
    }

    /// The page of `rows` (read with `limit + 1`, so one more means there is
    /// a next page) and the cursor of the next, nil on the last.
    func page<Row>(_ rows: [Row], id: (Row) -> Int64) -> ([Row], String?) {
        let page = Array(rows.prefix(limit))
        let next = rows.count > limit ? page.last.map { Self.encode(beforeID: id($0), kind: kind) } : nil
        return (page, next)
    }

    static func encode(beforeID: Int64, kind: String) -> String {
        Base64URL.encode(Array("\(kind):\(beforeID)".utf8))
    }

    static func decode(_ text: String, kind: String) -> Int64? {
        guard text.utf8.count <= 64, let bytes = Base64URL.decode(text),
              let string = String(bytes: bytes, encoding: .utf8), string.hasPrefix("\(kind):"),
              let id = Int64(string.dropFirst(kind.count + 1)), id > 0 else { return nil }
        return id
    }
}
