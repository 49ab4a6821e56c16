import Foundation
import Postgres
public import WalletCore

/// What Google Play credits read from the ledger before Google is asked.
extension LedgerStore {
    /// The product's Google Play id (its own id unless the catalog names
    /// another), or nil when it is not an active product.
    static func googleProductID(of productID: ProductID, on connection: Connection) throws -> String? {
        try connection.prepared("""
            SELECT coalesce(google_product_id, product_id) FROM wallet.products
            WHERE product_id = \(productID.rawValue) AND active
            """).single.map { try $0.decode(String.self, at: 0) }
    }

    /// The credit of a Google Play purchase token, or nil.
    static func credit(purchaseToken: String, on connection: Connection) throws -> Credit? {
        guard let flowNo = try connection.prepared("""
            SELECT flow_no FROM wallet.credits WHERE purchase_token = \(purchaseToken)
            """).single.map({ try $0.decode(String.self, at: 0) }).flatMap(FlowNumber.init) else { return nil }
        return try credit(flowNo, on: connection)
    }
}

extension Ledger {
    public func googleProductID(of productID: ProductID, deadline: ContinuousClock.Instant) throws -> String? {
        try reads.run(deadline: deadline) { try LedgerStore.googleProductID(of: productID, on: $0) }
    }

    public func credit(purchaseToken: String, deadline: ContinuousClock.Instant) throws -> LedgerStore.Credit? {
        try reads.run(deadline: deadline) { try LedgerStore.credit(purchaseToken: purchaseToken, on: $0) }
    }
}
