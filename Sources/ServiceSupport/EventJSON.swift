package import JSON
import Timestamps
import WalletCore
package import WalletStore

extension WalletEvent {
    /// The event as the feed (GET /v1/events) and webhook deliveries send it.
    package var json: JSONValue {
        [
            "id": JSONValue(id), "type": .string(type.rawValue), "user_id": .string(userID), "currency": .string(currency),
            "amount": JSONValue(amount), "balance_after": JSONValue(balanceAfter), "held": JSONValue(held),
            "available": JSONValue(available), "entry_id": entryID.map { JSONValue($0) } ?? .null,
            "hold_id": holdID.map { JSONValue($0) } ?? .null, "flow_no": flowNo.map(JSONValue.string) ?? .null,
            "created_at": .string(createdAt.rfc3339), "data": data,
        ]
    }
}
