import HTTPServer
import JSON
import WalletCore
import WalletStore

/// Response bodies, as the API documents them (see openapi.json), built as
/// `JSONValue` and written by its one serializer. Amounts and ids are JSON
/// integers; timestamps are RFC 3339 UTC strings. A debit's replay is built
/// here from the same stored values as its first answer, so both are the
/// same bytes.
enum ResponseBody {
    /// `held`: what the wallet's active holds keep; `available` = balance − held.
    static func balance(userID: String, currency: String, balance: Int64, held: Int64) -> JSONValue {
        ["user_id": .string(userID), "currency": .string(currency), "balance": JSONValue(balance),
         "held": JSONValue(held), "available": JSONValue(balance - held)]
    }

    static func credit(flowNo: String, userID: String, productID: String, quantity: Int,
                       _ state: LedgerStore.CreditState) -> JSONValue {
        [
            "flow_no": .string(flowNo), "user_id": .string(userID), "product_id": .string(productID),
            "quantity": JSONValue(quantity), "currency": .string(state.currency), "amount": JSONValue(state.amount),
            "status": .string(state.status), "entry_id": JSONValue(state.entryID),
            "created_at": .string(state.createdAt),
        ]
    }

    /// `{"credit", "balance"}`, for a credit made or replayed.
    static func credited(_ operation: LedgerStore.CreditOperation, _ state: LedgerStore.CreditState,
                         balance: Int64, held: Int64) -> JSONValue {
        [
            "credit": credit(flowNo: operation.flowNo.rawValue, userID: operation.userID.rawValue,
                             productID: operation.productID.rawValue, quantity: operation.quantity.value, state),
            "balance": self.balance(userID: operation.userID.rawValue, currency: state.currency, balance: balance,
                                    held: held),
        ]
    }

    /// `{"debit", "balance"}`. The request's fields are the first request's:
    /// a replay has the same request hash.
    static func debited(_ operation: LedgerStore.DebitOperation, entryID: Int64, createdAt: String,
                        balance: Int64, held: Int64) -> JSONValue {
        [
            "debit": [
                "id": JSONValue(entryID), "user_id": .string(operation.userID.rawValue),
                "currency": .string(operation.currency.rawValue), "amount": JSONValue(operation.amount.value),
                "reason": operation.reason.map(JSONValue.string) ?? .null, "entry_id": JSONValue(entryID),
                "created_at": .string(createdAt),
            ],
            "balance": self.balance(userID: operation.userID.rawValue, currency: operation.currency.rawValue,
                                    balance: balance, held: held),
        ]
    }

    /// A hold. Its metadata is the caller's object as the ledger keeps it.
    static func hold(_ hold: LedgerStore.Hold) throws -> JSONValue {
        [
            "id": JSONValue(hold.id), "user_id": .string(hold.userID), "currency": .string(hold.currency),
            "amount": JSONValue(hold.amount), "status": .string(hold.status.rawValue),
            "reason": hold.reason.map(JSONValue.string) ?? .null,
            "metadata": try hold.metadataJSON.map { try JSONParser.parse(Array($0.utf8)) } ?? .null,
            "created_at": .string(hold.createdAt), "expires_at": .string(hold.expiresAt),
            "captured_amount": hold.capturedAmount.map { JSONValue($0) } ?? .null,
            "captured_at": hold.capturedAt.map(JSONValue.string) ?? .null,
            "released_at": hold.releasedAt.map(JSONValue.string) ?? .null,
            "expired_at": hold.expiredAt.map(JSONValue.string) ?? .null,
        ]
    }

    /// `{"hold", "balance"}`, for a hold placed or released.
    static func hold(_ hold: LedgerStore.Hold, balance: Int64, held: Int64) throws -> JSONValue {
        [
            "hold": try self.hold(hold),
            "balance": self.balance(userID: hold.userID, currency: hold.currency, balance: balance, held: held),
        ]
    }

    /// `{"hold", "debit", "balance"}`, for a hold captured: the debit is the
    /// capture's entry, of the captured amount, at the capture's time.
    static func captured(_ hold: LedgerStore.Hold, entryID: Int64, amount: Int64, capturedAt: String,
                         balance: Int64, held: Int64) throws -> JSONValue {
        [
            "hold": try self.hold(hold),
            "debit": [
                "id": JSONValue(entryID), "user_id": .string(hold.userID), "currency": .string(hold.currency),
                "amount": JSONValue(amount), "reason": hold.reason.map(JSONValue.string) ?? .null,
                "entry_id": JSONValue(entryID), "created_at": .string(capturedAt),
            ],
            "balance": self.balance(userID: hold.userID, currency: hold.currency, balance: balance, held: held),
        ]
    }

    static func wallet(userID: String, balances: [WalletBalance]) -> JSONValue {
        [
            "user_id": .string(userID),
            "balances": .array(balances.map {
                ["balance": JSONValue($0.balance), "currency": .string($0.currency), "held": JSONValue($0.held),
                 "available": JSONValue($0.available)]
            }),
        ]
    }

    static func entries(_ entries: [LedgerStore.Entry], nextCursor: String?) -> JSONValue {
        [
            "entries": .array(entries.map { entry in
                [
                    "id": JSONValue(entry.id), "currency": .string(entry.currency), "amount": JSONValue(entry.amount),
                    "balance_after": JSONValue(entry.balanceAfter), "kind": .string(entry.kind),
                    "reference": .string(entry.reference), "created_at": .string(entry.createdAt),
                ]
            }),
            // Null on the last page.
            "next_cursor": nextCursor.map(JSONValue.string) ?? .null,
        ]
    }

    static func status(_ status: String) -> JSONValue {
        ["status": .string(status)]
    }
}
