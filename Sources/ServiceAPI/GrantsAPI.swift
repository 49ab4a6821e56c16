import Crypto
import HTTPServer
import JSON
import ServiceSupport
import WalletCore
import WalletStore

/// The game server's rewards: free coins under an idempotency key.
extension WalletAPI {
    /// `POST /v1/grants` (scope `grant`): 201 with the grant and the
    /// balance, the first answer replayed for a retry of the same request.
    /// Applied by the group commit's writer for the player's wallet, as
    /// credits, debits and holds are: no server thread waits on the database.
    func postGrant(_ request: Request, _ responder: Responder) {
        do {
            let client = client(of: request)
            let json = try JSONBody.parse(request)
            let key = try idempotencyKey(request)
            let body = try GrantBody(json: json)
            guard body.amount.value <= grantAmountMax else { throw WalletError.grantLimitExceeded(max: grantAmountMax) }
            let operation = GrantOperation(
                client: client.name, key: key, requestHash: SHA256.hash(body.canonicalText), userID: body.userID,
                currency: body.currency, amount: body.amount, reason: body.reason, expiresInDays: body.expiresInDays,
                metadata: nil, requestID: request.requestID)
            if ledger.groupCommit.isStopping { throw WalletError.shuttingDown }
            ledger.groupCommit.submit(.grant(operation), deadline: deadline()) { result in
                respond(responder) {
                    guard case .grant(let grant) = try result.get() else { preconditionFailure("grant answered as another operation") }
                    return try grantResponse(grant, operation)
                }
            }
        } catch {
            responder.fail(error)
        }
    }

    private func grantResponse(_ result: GrantResult, _ operation: GrantOperation) throws -> Response {
        switch result.outcome {
        case .granted:
            guard let granted = result.granted else { throw LedgerStore.StoreError.missingColumn("granted") }
            if !result.replayed { metrics.countCoins(.granted, granted.amount) }
            return .json(ResponseBody.granted(operation, granted), status: 201,
                         headers: result.replayed ? [("Idempotent-Replayed", "true")] : [])
        case .idempotencyKeyReused:
            throw WalletError.idempotencyKeyReused
        case .unknownCurrency:
            throw WalletError.unknownCurrency(operation.currency.rawValue)
        case .paidCurrencyNotGrantable:
            throw WalletError.paidCurrencyNotGrantable(operation.currency.rawValue)
        }
    }
}
