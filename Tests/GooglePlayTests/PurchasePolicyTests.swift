import Crypto
import GooglePlay
import Testing
import WalletCore

struct PurchasePolicyTests {
    private static let token = "opaque-purchase-token.AO-J1Oz"
    private static let userID = "user-42"
    private static let userAccountID = SHA256.hex(Array("user-42".utf8))
    private static let productID = "coins_600"

    private static func purchase(state: Int = 0, type: Int? = nil, orderID: String? = "GPA.1234-5678-9012-34567",
                                 quantity: Int? = nil, accountID: String? = nil) -> ProductPurchase {
        ProductPurchase(purchaseState: state, consumptionState: 0, purchaseType: type, orderId: orderID,
                        quantity: quantity, obfuscatedExternalAccountId: accountID)
    }

    private static func refusal(_ purchase: ProductPurchase, policy: PurchasePolicy = PurchasePolicy(),
                                productID: String = productID, flowNo: String? = nil, quantity: Int? = nil) -> String? {
        do {
            _ = try policy.check(purchase, productID: productID, purchaseToken: token, userID: userID, requestedFlowNo: flowNo,
                                 requestedQuantity: quantity)
            return nil
        } catch {
            #expect(!error.detail.contains(token) && !error.detail.contains(userID))
            return error.reason.rawValue
        }
    }

    @Test func aPaidPurchaseIsCreditedUnderItsOrderID() throws {
        let accepted = try PurchasePolicy().check(Self.purchase(), productID: Self.productID, purchaseToken: Self.token, userID: Self.userID,
                                                  requestedFlowNo: nil, requestedQuantity: nil)
        #expect(accepted == .init(flowNo: "GPA.1234-5678-9012-34567", quantity: 1, environment: .production))
        let stated = try PurchasePolicy().check(Self.purchase(quantity: 3), productID: Self.productID, purchaseToken: Self.token,
                                                userID: Self.userID, requestedFlowNo: "GPA.1234-5678-9012-34567",
                                                requestedQuantity: 3)
        #expect(stated == .init(flowNo: "GPA.1234-5678-9012-34567", quantity: 3, environment: .production))
    }

    @Test func theFlowNoIsTheOrderIDOrDerivedFromTheToken() {
        #expect(PurchasePolicy.flowNo(orderID: "GPA.1", purchaseToken: "t") == "GPA.1")
        // SHA-256("abc") begins ba7816bf8f01cfea414140de5dae2223.
        #expect(PurchasePolicy.flowNo(orderID: nil, purchaseToken: "abc") == "gp:ba7816bf8f01cfea414140de5dae2223")
        #expect(PurchasePolicy.flowNo(orderID: "", purchaseToken: "abc") == "gp:ba7816bf8f01cfea414140de5dae2223")
        let derived = PurchasePolicy.flowNo(orderID: nil, purchaseToken: Self.token)
        #expect(derived.count == 3 + 32)
        #expect(derived == "gp:" + String(SHA256.hex(Array(Self.token.utf8)).prefix(32)))
        #expect(PurchasePolicy.flowNo(orderID: nil, purchaseToken: Self.token + "x") != derived)
    }

    @Test func aPromoWithoutOrderIDIsCreditedUnderTheDerivedFlowNo() throws {
        let accepted = try PurchasePolicy().check(Self.purchase(type: 1, orderID: nil), productID: Self.productID, purchaseToken: Self.token,
                                                  userID: Self.userID, requestedFlowNo: nil, requestedQuantity: nil)
        #expect(accepted.flowNo == PurchasePolicy.flowNo(orderID: nil, purchaseToken: Self.token))
        #expect(accepted.environment == .promo)
        #expect(Self.refusal(Self.purchase(type: 1, orderID: nil), flowNo: accepted.flowNo) == nil)
        #expect(Self.refusal(Self.purchase(type: 1, orderID: nil), flowNo: "GPA.1234-5678-9012-34567")
            == "transaction_mismatch")
    }

    @Test func theStateComesFirst() {
        #expect(Self.refusal(Self.purchase(state: 2)) == "purchase_pending")
        #expect(Self.refusal(Self.purchase(state: 1)) == "revoked")
        #expect(Self.refusal(Self.purchase(state: 3)) == "malformed")
        #expect(Self.refusal(Self.purchase(state: -1)) == "malformed")
        // Before the type, the quantity, the account and the request.
        #expect(Self.refusal(Self.purchase(state: 2, type: 2, quantity: 11, accountID: "other"), flowNo: "x")
            == "purchase_pending")
        #expect(Self.refusal(Self.purchase(state: 1, type: 0, quantity: 0), quantity: 5) == "revoked")
    }

    @Test func theTypeDecidesTheEnvironment() throws {
        #expect(Self.refusal(Self.purchase(type: 2)) == "not_consumable")
        #expect(Self.refusal(Self.purchase(type: 0)) == "environment_not_allowed")
        #expect(Self.refusal(Self.purchase(type: 7)) == "malformed")
        let tests = PurchasePolicy(allowTestPurchases: true)
        let accepted = try tests.check(Self.purchase(type: 0), productID: Self.productID, purchaseToken: Self.token, userID: Self.userID,
                                       requestedFlowNo: nil, requestedQuantity: nil)
        #expect(accepted.environment == .test)
        // Allowing tests does not allow rewarded products.
        #expect(Self.refusal(Self.purchase(type: 2), policy: tests) == "not_consumable")
        // The type comes before the quantity.
        #expect(Self.refusal(Self.purchase(type: 2, quantity: 11)) == "not_consumable")
    }

    @Test func theQuantityLiesInOneToTen() throws {
        #expect(Self.refusal(Self.purchase(quantity: 3)) == nil)
        #expect(Self.refusal(Self.purchase(quantity: 10)) == nil)
        #expect(Self.refusal(Self.purchase(quantity: 11)) == "quantity_out_of_range")
        #expect(Self.refusal(Self.purchase(quantity: 0)) == "quantity_out_of_range")
        #expect(Self.refusal(Self.purchase(quantity: -1)) == "quantity_out_of_range")
        // Absent is 1.
        let accepted = try PurchasePolicy().check(Self.purchase(quantity: nil), productID: Self.productID, purchaseToken: Self.token,
                                                  userID: Self.userID, requestedFlowNo: nil, requestedQuantity: 1)
        #expect(accepted.quantity == 1)
        // Before the account.
        #expect(Self.refusal(Self.purchase(quantity: 11, accountID: "other")) == "quantity_out_of_range")
    }

    @Test func theAccountBindingIsTheUsersHash() {
        #expect(PurchasePolicy.accountID(forUserID: Self.userID) == Self.userAccountID)
        #expect(Self.userAccountID.count == 64)
        #expect(Self.refusal(Self.purchase(accountID: Self.userAccountID)) == nil)
        #expect(Self.refusal(Self.purchase(accountID: Self.userAccountID.uppercased())) == nil)
        #expect(Self.refusal(Self.purchase(accountID: SHA256.hex(Array("user-43".utf8)))) == "account_mismatch")
        #expect(Self.refusal(Self.purchase(accountID: Self.userID)) == "account_mismatch")
        #expect(Self.refusal(Self.purchase(accountID: "")) == "account_mismatch")
        // Absent: fine unless required.
        #expect(Self.refusal(Self.purchase(accountID: nil)) == nil)
        let strict = PurchasePolicy(requireAccountID: true)
        #expect(Self.refusal(Self.purchase(accountID: nil), policy: strict) == "account_mismatch")
        #expect(Self.refusal(Self.purchase(accountID: Self.userAccountID), policy: strict) == nil)
        // Before the request's flowNO.
        #expect(Self.refusal(Self.purchase(accountID: nil), policy: strict, flowNo: "other") == "account_mismatch")
    }

    @Test func theRequestMustDescribeThisPurchase() {
        #expect(Self.refusal(Self.purchase(), flowNo: "GPA.1234-5678-9012-34567") == nil)
        #expect(Self.refusal(Self.purchase(), flowNo: "GPA.0000-0000-0000-00000") == "transaction_mismatch")
        #expect(Self.refusal(Self.purchase(), flowNo: PurchasePolicy.flowNo(orderID: nil, purchaseToken: Self.token))
            == "transaction_mismatch")
        #expect(Self.refusal(Self.purchase(quantity: 3), quantity: 2) == "transaction_mismatch")
        #expect(Self.refusal(Self.purchase(quantity: nil), quantity: 2) == "transaction_mismatch")
        #expect(Self.refusal(Self.purchase(quantity: 3), quantity: 3) == nil)
    }

    @Test func aPurchaseOfAnotherProductIsRefusedBeforeAnythingElse() {
        var other = Self.purchase()
        other.productId = "coins_100"
        #expect(Self.refusal(other) == "product_mismatch")
        // First: even a canceled purchase of another product is a mismatch.
        other.purchaseState = ProductPurchase.stateCanceled
        #expect(Self.refusal(other) == "product_mismatch")
        var same = Self.purchase()
        same.productId = Self.productID
        #expect(Self.refusal(same) == nil)
        // Google may leave productId out: then there is nothing to compare.
        #expect(Self.refusal(Self.purchase()) == nil)
    }

    @Test func aConsumedPurchaseIsStillCredited() {
        var consumed = Self.purchase()
        consumed.consumptionState = 1
        #expect(Self.refusal(consumed) == nil)
    }

    @Test func theReasonsAreTheDocumentedCodes() {
        let reasons: [RefusalReason] = [
            .purchasePending, .revoked, .notConsumable, .environmentNotAllowed, .quantityOutOfRange, .accountMismatch,
            .transactionMismatch, .productMismatch, .malformed,
        ]
        #expect(reasons.map(\.rawValue) == [
            "purchase_pending", "revoked", "not_consumable", "environment_not_allowed", "quantity_out_of_range",
            "account_mismatch", "transaction_mismatch", "product_mismatch", "malformed",
        ])
        #expect("\(PurchaseRefusal(.revoked, "why"))" == "revoked: why")
    }
}
