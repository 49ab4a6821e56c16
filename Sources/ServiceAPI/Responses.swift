import Foundation
import HTTPServer
import JSON
import Timestamps
import WalletCore
import WalletStore

/// Response bodies, as the API documents them (see openapi.json), built as
/// `JSONValue` and written by its one serializer. Amounts and ids are JSON
/// integers; timestamps are `Date.rfc3339` strings (UTC, six fractional
/// digits), as the ledger's own `wallet.rfc3339` wrote them into answers an
/// earlier release stored. A debit's replay is built here from the same
/// stored values as its first answer, so both are the same bytes.
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
            "status": .string(state.status.rawValue), "entry_id": JSONValue(state.entryID),
            "created_at": time(state.createdAt),
        ]
    }

    /// A credit as it is now (`GET /v1/credits/{flow_no}` and the player's
    /// list): the credit's fields, how it was verified (`source`), the
    /// store environment, what refunds took back so far, and the product's
    /// other lines it got.
    static func creditRecord(_ credit: LedgerStore.Credit) -> JSONValue {
        let state = credit.state
        return [
            "flow_no": .string(credit.flowNo), "user_id": .string(credit.userID), "product_id": .string(credit.productID),
            "quantity": JSONValue(credit.quantity), "currency": .string(state.currency), "amount": JSONValue(state.amount),
            "status": .string(state.status.rawValue), "entry_id": JSONValue(state.entryID),
            "created_at": time(state.createdAt), "source": .string(credit.source),
            "environment": credit.environment.map(JSONValue.string) ?? .null,
            "refunded_amount": credit.refundedAmount.map { JSONValue($0) } ?? .null,
            "lines": .array(credit.lines.map { line in
                ["currency": .string(line.currency), "amount": JSONValue(line.amount),
                 "refunded_amount": JSONValue(line.refundedAmount)]
            }),
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
    static func debited(_ operation: LedgerStore.DebitOperation, entryID: Int64, createdAt: Date,
                        balance: Int64, held: Int64) -> JSONValue {
        [
            "debit": [
                "id": JSONValue(entryID), "user_id": .string(operation.userID.rawValue),
                "currency": .string(operation.currency.rawValue), "amount": JSONValue(operation.amount.value),
                "reason": operation.reason.map(JSONValue.string) ?? .null, "entry_id": JSONValue(entryID),
                "created_at": time(createdAt),
            ],
            "balance": self.balance(userID: operation.userID.rawValue, currency: operation.currency.rawValue,
                                    balance: balance, held: held),
        ]
    }

    /// `{"grant", "balance"}`. The request's fields are the first request's:
    /// a replay has the same request hash.
    static func granted(_ operation: GrantOperation, _ granted: GrantResult.Granted) -> JSONValue {
        [
            "grant": [
                "id": JSONValue(granted.entryID), "user_id": .string(operation.userID.rawValue),
                "currency": .string(operation.currency.rawValue), "amount": JSONValue(granted.amount),
                "reason": .string(operation.reason), "expires_at": time(granted.expiresAt),
                "entry_id": JSONValue(granted.entryID), "created_at": time(granted.createdAt),
            ],
            "balance": balance(userID: operation.userID.rawValue, currency: operation.currency.rawValue,
                               balance: granted.balance, held: granted.held),
        ]
    }

    /// A hold. Its metadata is the caller's object as the ledger keeps it.
    static func hold(_ hold: LedgerStore.Hold) throws -> JSONValue {
        [
            "id": JSONValue(hold.id), "user_id": .string(hold.userID), "currency": .string(hold.currency),
            "amount": JSONValue(hold.amount), "status": .string(hold.status.rawValue),
            "reason": hold.reason.map(JSONValue.string) ?? .null,
            "metadata": try hold.metadataJSON.map { try JSONParser.parse(Array($0.utf8)) } ?? .null,
            "created_at": time(hold.createdAt), "expires_at": time(hold.expiresAt),
            "captured_amount": hold.capturedAmount.map { JSONValue($0) } ?? .null,
            "captured_at": time(hold.capturedAt), "released_at": time(hold.releasedAt), "expired_at": time(hold.expiredAt),
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
    static func captured(_ hold: LedgerStore.Hold, entryID: Int64, amount: Int64, capturedAt: Date,
                         balance: Int64, held: Int64) throws -> JSONValue {
        [
            "hold": try self.hold(hold),
            "debit": [
                "id": JSONValue(entryID), "user_id": .string(hold.userID), "currency": .string(hold.currency),
                "amount": JSONValue(amount), "reason": hold.reason.map(JSONValue.string) ?? .null,
                "entry_id": JSONValue(entryID), "created_at": time(capturedAt),
            ],
            "balance": self.balance(userID: hold.userID, currency: hold.currency, balance: balance, held: held),
        ]
    }

    static func wallet(userID: String, balances: [WalletBalance]) -> JSONValue {
        [
            "user_id": .string(userID),
            "balances": .array(balances.map {
                ["balance": JSONValue($0.balance), "currency": .string($0.currency), "held": JSONValue($0.held),
                 "available": JSONValue($0.available), "paid": JSONValue($0.paid), "free": JSONValue($0.free),
                 "debt": JSONValue($0.debt),
                 "next_expiry": $0.nextExpiry.map { ["amount": JSONValue($0.amount), "at": time($0.at)] } ?? .null]
            }),
        ]
    }

    static func entries(_ entries: [LedgerStore.Entry], nextCursor: String?) -> JSONValue {
        [
            "entries": .array(entries.map { entry in
                [
                    "id": JSONValue(entry.id), "currency": .string(entry.currency), "amount": JSONValue(entry.amount),
                    "balance_after": JSONValue(entry.balanceAfter), "kind": .string(entry.kind.rawValue),
                    "reference": .string(entry.reference), "created_at": time(entry.createdAt),
                ]
            }),
            // Null on the last page.
            "next_cursor": nextCursor.map(JSONValue.string) ?? .null,
        ]
    }

    static func status(_ status: String) -> JSONValue {
        ["status": .string(status)]
    }

    /// A time as every body writes one; null for none.
    static func time(_ date: Date?) -> JSONValue {
        date.map { .string($0.rfc3339) } ?? .null
    }
}
