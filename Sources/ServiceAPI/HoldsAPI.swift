import Crypto
import Foundation
import HTTPServer
import JSON
import ServiceSupport
import WalletCore
import WalletStore

/// Holds: `POST /v1/holds`, `POST /v1/holds/{id}/capture`,
/// `POST /v1/holds/{id}/release` (scope `debit`, each with an
/// Idempotency-Key) and `GET /v1/holds/{id}` (scope `read`).
///
/// Each POST goes to the group-commit writer of its wallet, as debits do,
/// and runs in that writer's next batch. Its answer comes back in typed
/// values, stored with the key, and is written by `ResponseBody` as a
/// debit's is, so a replay (with `Idempotent-Replayed`) is the same bytes.
extension WalletAPI {
    func registerHolds(on router: Router) {
        router.add("POST", "/v1/holds", gate: admit(.debit), postHold)
        for action in [HoldAction.capture, .release] {
            router.add("POST", "/v1/holds/{id}/\(action.rawValue)", gate: admit(.debit)) { request, responder in
                postHoldAction(request, responder, action: action)
            }
        }
        router.add("GET", "/v1/holds/{id}", gate: admit(.read), sync: getHold)
        router.add("GET", "/v1/wallets/{user_id}/holds", gate: admit(.read), sync: listHolds)
    }

    func postHold(_ request: Request, _ responder: Responder) {
        do {
            let client = client(of: request)
            let json = try JSONBody.parse(request)
            let key = try idempotencyKey(request)
            let body = try HoldBody(json: json)
            let hold = LedgerStore.HoldRequest(
                client: client.name, anyClient: client.allows(.admin), key: key,
                requestHash: SHA256.hash(body.canonicalText), requestID: request.requestID,
                operation: .place(user: body.spend.userID, currency: body.spend.currency, amount: body.spend.amount,
                                  reason: body.spend.reason, metadata: body.spend.metadataText,
                                  expiresInSeconds: body.expiresInSeconds))
            try runHold(hold, responder)
        } catch {
            responder.fail(error)
        }
    }

    func postHoldAction(_ request: Request, _ responder: Responder, action: HoldAction) {
        do {
            let client = client(of: request)
            let holdID = try Self.holdID(request)
            // No body, or an empty one, is an empty object.
            let json: JSONValue = request.body.isEmpty ? .object([]) : try JSONBody.parse(request)
            let key = try idempotencyKey(request)
            let body = try HoldActionBody(json: json, action: action)
            let operation: LedgerStore.HoldOperation = switch action {
            case .capture: .capture(holdID: holdID, amount: body.amount)
            case .release: .release(holdID: holdID)
            case .place: preconditionFailure("a hold is placed by POST /v1/holds, not by an action on one")
            }
            let hold = LedgerStore.HoldRequest(
                client: client.name, anyClient: client.allows(.admin), key: key,
                requestHash: SHA256.hash(body.canonicalText(action: action, holdID: holdID)),
                requestID: request.requestID, operation: operation)
            try runHold(hold, responder)
        } catch {
            responder.fail(error)
        }
    }

    func getHold(_ request: Request) throws -> Response {
        let client = client(of: request)
        let holdID = try Self.holdID(request)
        guard let hold = try ledger.hold(id: holdID, client: client.name, anyClient: client.allows(.admin)) else {
            throw WalletError.notFound(detail: "no hold \(holdID)")
        }
        return .json(["hold": try ResponseBody.hold(hold)])
    }

    /// `GET /v1/wallets/{user_id}/holds?status=&limit=&cursor=`: the
    /// player's holds this key placed (every client's for `admin`), newest
    /// first; `status` is `active` (held, and not past its time),
    /// `captured`, `released` or `expired`.
    func listHolds(_ request: Request) throws -> Response {
        let client = client(of: request)
        let userID = try pathUserID(request)
        var errors: [FieldError] = []
        var status: HoldStatus?
        if let text = request.query["status"], !text.isEmpty {
            status = text == "active" ? .held : HoldStatus(rawValue: text).flatMap { $0 == .held ? nil : $0 }
            if status == nil {
                errors.append(FieldError(field: "status", message: "must be active, captured, released or expired"))
            }
        }
        let paging = Paging(request, kind: "holds", errors: &errors)
        if !errors.isEmpty { throw WalletError.validationFailed(errors) }
        let rows = try ledger.holds(of: userID, client: client.name, anyClient: client.allows(.admin), status: status,
                                    beforeID: paging.beforeID, limit: paging.limit)
        let (page, next) = paging.page(rows, id: \.id)
        return .json(["holds": .array(try page.map(ResponseBody.hold)), "next_cursor": next.map(JSONValue.string) ?? .null])
    }

    /// Queues the operation to the writer of the hold's wallet: a place by
    /// its user, a capture or release by its hold's owner (read first).
    private func runHold(_ hold: LedgerStore.HoldRequest, _ responder: Responder) throws {
        if ledger.groupCommit.isStopping { throw WalletError.shuttingDown }
        let route: String
        switch hold.operation {
        case .place(let user, _, _, _, _, _):
            route = user.rawValue
        case .capture(let id, _), .release(let id):
            route = try ledger.holdOwner(id: id) ?? "hold:\(id)"
        }
        ledger.groupCommit.submit(.hold(hold, route: route), deadline: deadline()) { result in
            respond(responder) {
                guard case .hold(let outcome) = try result.get() else { preconditionFailure("hold answered as another operation") }
                if let hold = outcome.hold { ledger.rememberOwner(of: hold) }
                return try holdResponse(outcome, for: hold.operation)
            }
        }
    }

    /// The answer for a hold operation's outcome, first sent or replayed.
    func holdResponse(_ result: LedgerStore.HoldResult, for operation: LedgerStore.HoldOperation) throws -> Response {
        let headers: [(name: String, value: String)] = result.replayed ? [("Idempotent-Replayed", "true")] : []
        func problem(_ error: WalletError) -> Response {
            var problem = error.problem
            problem.instance = result.requestID
            problem.headers += headers
            return .problem(problem)
        }
        func missing(_ what: String) -> LedgerStore.StoreError {
            .missingColumn("\(result.outcome.rawValue) \(what)")
        }
        switch result.outcome {
        case .held, .captured, .released:
            let status = result.outcome == .released ? 200 : 201
            if let stored = result.storedResponse {
                // Stored whole by an earlier release: replayed as first sent.
                return LegacyReplay.response(stored, status: status, headers: headers)
            }
            guard let hold = result.hold else { throw missing("hold") }
            guard let balance = result.balance, let held = result.held else { throw missing("balance") }
            guard result.outcome == .captured else {
                return .json(try ResponseBody.hold(hold, balance: balance, held: held), status: status, headers: headers)
            }
            guard let entryID = hold.entryID, let amount = hold.capturedAmount, let capturedAt = hold.capturedAt else {
                throw missing("capture")
            }
            if !result.replayed { metrics.countCoins(.debited, amount) }
            return .json(try ResponseBody.captured(hold, entryID: entryID, amount: amount, capturedAt: capturedAt,
                                                   balance: balance, held: held),
                         status: status, headers: headers)
        case .insufficientFunds:
            guard let balance = result.balance, let held = result.held else { throw missing("balance") }
            return problem(.insufficientFunds(balance: balance, available: balance - held))
        case .holdNotActive:
            guard let hold = result.hold else { throw missing("hold") }
            return problem(.holdNotActive(status: hold.status))
        case .amountExceedsHold:
            guard let hold = result.hold else { throw missing("hold") }
            return problem(.amountExceedsHold(held: hold.amount))
        case .notFound:
            throw WalletError.notFound(detail: "no such hold")
        case .idempotencyKeyReused:
            throw WalletError.idempotencyKeyReused
        case .unknownCurrency:
            guard case .place(_, let currency, _, _, _, _) = operation else { throw missing("currency") }
            throw WalletError.unknownCurrency(currency.rawValue)
        }
    }

    static func holdID(_ request: Request) throws -> Int64 {
        guard let text = request.pathParameters["id"], let id = Int64(text), id > 0, String(id) == text else {
            throw WalletError.notFound(detail: "no such hold")
        }
        return id
    }
}
