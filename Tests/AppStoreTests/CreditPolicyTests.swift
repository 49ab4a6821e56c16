import AppStore
import Foundation
import TestSupport
import Testing
import WalletCore

@Suite struct CreditPolicyTests {
    static let namespace = "0f2d4c6e-8a1b-4c3d-9e5f-a7b9c1d3e5f7"
    static let userID = "user-42"
    static let flowNo = "2000000000000001"
    static let productID = "coins.1000"
    /// UUIDv5(namespace, "user-42"), computed independently with Python's uuid.uuid5.
    static let userToken = "0266ef15-c89f-5ca0-b205-18b9a6fc1282"

    /// A payload decoded the way the verifier decodes one, from
    /// `FakeAppStore.transaction()` with some fields changed or removed.
    static func payload(
        _ changes: [String: Any] = [:],
        removing: [String] = []
    ) throws -> TransactionPayload {
        var object = FakeAppStore.transaction()
        object["appAccountToken"] = userToken
        object.merge(changes) { _, new in new }
        for key in removing { object.removeValue(forKey: key) }
        return try JSONDecoder().decode(TransactionPayload.self, from: Data(FakeAppStore.json(object)))
    }

    static func check(
        _ payload: TransactionPayload,
        policy: CreditPolicy = CreditPolicy(accountTokenNamespace: namespace),
        flowNo: String = flowNo,
        productID: String = productID,
        userID: String = userID,
        requestedQuantity: Int? = nil
    ) -> Result<Int, PolicyError> {
        Result { () throws(PolicyError) -> Int in
            try policy.check(
                payload, flowNo: flowNo, productID: productID, userID: userID, requestedQuantity: requestedQuantity
            )
        }
    }

    static func reason(_ result: Result<Int, PolicyError>) -> RefusalReason? {
        if case .failure(let error) = result { return error.reason }
        return nil
    }

    @Test(.timeLimit(.minutes(1)))
    func theTestTokenIsTheUsersUUIDv5() {
        #expect(NameBasedUUID.v5(namespace: Self.namespace, name: Self.userID) == Self.userToken)
        #expect(CreditPolicy(accountTokenNamespace: Self.namespace).expectedAccountToken(userID: Self.userID) == Self.userToken)
        #expect(CreditPolicy().expectedAccountToken(userID: Self.userID) == nil)
        #expect(CreditPolicy(accountTokenNamespace: "nope").expectedAccountToken(userID: Self.userID) == nil)
    }

    @Test(.timeLimit(.minutes(1)))
    func aMatchingConsumableIsCreditedWithItsSignedQuantity() throws {
        #expect(try Self.check(Self.payload()).get() == 1)
        #expect(try Self.check(Self.payload(["quantity": 3])).get() == 3)
        #expect(try Self.check(Self.payload(["quantity": 3]), requestedQuantity: 3).get() == 3)
        #expect(try Self.check(Self.payload(["quantity": 10]), requestedQuantity: 10).get() == 10)
        #expect(try Self.check(Self.payload(), requestedQuantity: 1).get() == 1)
    }

    @Test(.timeLimit(.minutes(1)))
    func anAbsentQuantityIsOne() throws {
        let payload = try Self.payload(removing: ["quantity"])
        #expect(payload.quantity == nil)
        #expect(try Self.check(payload).get() == 1)
        #expect(try Self.check(payload, requestedQuantity: 1).get() == 1)
        #expect(Self.reason(Self.check(payload, requestedQuantity: 2)) == RefusalReason.transactionMismatch)
    }

    @Test(.timeLimit(.minutes(1)))
    func onlyConsumablesAreCredited() throws {
        for type in ["Non-Consumable", "Auto-Renewable Subscription", "Non-Renewing Subscription", "consumable", ""] {
            #expect(Self.reason(Self.check(try Self.payload(["type": type]))) == RefusalReason.notConsumable)
        }
    }

    @Test(.timeLimit(.minutes(1)))
    func revokedTransactionsAreRefused() throws {
        let revocations: [[String: Any]] = [
            ["revocationDate": FakeAppStore.signedDateMilliseconds - 1000, "revocationReason": 0],
            ["revocationDate": FakeAppStore.signedDateMilliseconds - 1000],
            ["revocationReason": 1],
            ["revocationType": "REFUND_FULL"],
        ]
        for revocation in revocations {
            #expect(Self.reason(Self.check(try Self.payload(revocation))) == RefusalReason.revoked)
        }
    }

    @Test(.timeLimit(.minutes(1)))
    func theFlowNoMustBeTheTransactionID() throws {
        let payload = try Self.payload()
        #expect(Self.reason(Self.check(payload, flowNo: "2000000000000002")) == RefusalReason.transactionMismatch)
        #expect(Self.reason(Self.check(payload, flowNo: "")) == RefusalReason.transactionMismatch)
        #expect(Self.reason(Self.check(payload, flowNo: " 2000000000000001")) == RefusalReason.transactionMismatch)
        // The original transaction ID is not the transaction ID.
        let renewed = try Self.payload(["originalTransactionId": "1999"])
        #expect(Self.reason(Self.check(renewed, flowNo: "1999")) == RefusalReason.transactionMismatch)
    }

    @Test(.timeLimit(.minutes(1)))
    func theProductMustMatch() throws {
        let payload = try Self.payload()
        #expect(Self.reason(Self.check(payload, productID: "coins.5000")) == RefusalReason.productMismatch)
        #expect(Self.reason(Self.check(payload, productID: "COINS.1000")) == RefusalReason.productMismatch)
    }

    @Test(.timeLimit(.minutes(1)))
    func aSignedQuantityOutsideApplesRangeIsMalformed() throws {
        for quantity in [0, -1, 11, Int.max] {
            let result = Self.check(try Self.payload(["quantity": quantity]))
            #expect(Self.reason(result) == RefusalReason.malformed)
            #expect(Self.reason(result) == VerificationFailure.malformed.refusalReason)
        }
    }

    @Test(.timeLimit(.minutes(1)))
    func aRequestedQuantityMustEqualTheSignedOne() throws {
        let payload = try Self.payload(["quantity": 3])
        for requested in [1, 2, 4, 30, 0, -3] {
            #expect(Self.reason(Self.check(payload, requestedQuantity: requested)) == RefusalReason.transactionMismatch)
        }
    }

    @Test(.timeLimit(.minutes(1)))
    func theAccountTokenMustBeTheUsers() throws {
        let payload = try Self.payload()
        #expect(Self.reason(Self.check(payload, userID: "user-43")) == RefusalReason.accountMismatch)
        #expect(Self.reason(Self.check(payload, userID: "")) == RefusalReason.accountMismatch)
        let otherNamespace = CreditPolicy(accountTokenNamespace: "6ba7b810-9dad-11d1-80b4-00c04fd430c8")
        #expect(Self.reason(Self.check(payload, policy: otherNamespace)) == RefusalReason.accountMismatch)
        let strange = try Self.payload(["appAccountToken": "not a uuid"])
        #expect(Self.reason(Self.check(strange)) == RefusalReason.accountMismatch)
    }

    @Test(.timeLimit(.minutes(1)))
    func theAccountTokenIsComparedWithoutLetterCase() throws {
        let payload = try Self.payload(["appAccountToken": Self.userToken.uppercased()])
        #expect(try Self.check(payload).get() == 1)
        let namespaceInCapitals = CreditPolicy(accountTokenNamespace: Self.namespace.uppercased())
        #expect(try Self.check(payload, policy: namespaceInCapitals).get() == 1)
    }

    @Test(.timeLimit(.minutes(1)))
    func withoutANamespaceTokensAreNotCompared() throws {
        let policy = CreditPolicy()
        #expect(try Self.check(Self.payload(), policy: policy, userID: "someone-else").get() == 1)
        #expect(try Self.check(Self.payload(removing: ["appAccountToken"]), policy: policy).get() == 1)
    }

    @Test(.timeLimit(.minutes(1)))
    func aMissingTokenPassesUnlessRequired() throws {
        let payload = try Self.payload(removing: ["appAccountToken"])
        #expect(try Self.check(payload).get() == 1)
        let requiring = CreditPolicy(accountTokenNamespace: Self.namespace, requireAccountToken: true)
        #expect(Self.reason(Self.check(payload, policy: requiring)) == RefusalReason.accountMismatch)
        #expect(try Self.check(Self.payload(), policy: requiring).get() == 1)
        // Required but not compared: any token will do, none will not.
        let presenceOnly = CreditPolicy(requireAccountToken: true)
        #expect(Self.reason(Self.check(payload, policy: presenceOnly)) == RefusalReason.accountMismatch)
        #expect(try Self.check(
            Self.payload(["appAccountToken": "7e3fb20b-4cdb-47cc-936d-99d65f608138"]), policy: presenceOnly
        ).get() == 1)
    }

    @Test(.timeLimit(.minutes(1)))
    func aNamespaceThatIsNotAUUIDFailsClosed() throws {
        let broken = CreditPolicy(accountTokenNamespace: "not-a-uuid")
        #expect(Self.reason(Self.check(try Self.payload(), policy: broken)) == RefusalReason.accountMismatch)
        // Without a token there is nothing to compare.
        #expect(try Self.check(Self.payload(removing: ["appAccountToken"]), policy: broken).get() == 1)
    }

    /// When several rules fail, the first in the documented order decides.
    @Test(.timeLimit(.minutes(1)))
    func rulesRunInOrder() throws {
        let everythingWrong = try Self.payload([
            "type": "Non-Consumable", "revocationDate": 1, "quantity": 50, "appAccountToken": "x",
        ])
        #expect(
            Self.reason(Self.check(everythingWrong, flowNo: "1", productID: "p", requestedQuantity: 2))
                == RefusalReason.notConsumable
        )
        let revoked = try Self.payload(["revocationDate": 1, "quantity": 50, "appAccountToken": "x"])
        #expect(Self.reason(Self.check(revoked, flowNo: "1", productID: "p")) == RefusalReason.revoked)
        let wrongFlow = try Self.payload(["quantity": 50, "appAccountToken": "x"])
        #expect(Self.reason(Self.check(wrongFlow, flowNo: "1", productID: "p")) == RefusalReason.transactionMismatch)
        #expect(Self.reason(Self.check(wrongFlow, productID: "p")) == RefusalReason.productMismatch)
        #expect(Self.reason(Self.check(wrongFlow, requestedQuantity: 2)) == RefusalReason.malformed)
        let wrongToken = try Self.payload(["quantity": 2, "appAccountToken": "x"])
        #expect(Self.reason(Self.check(wrongToken, requestedQuantity: 3)) == RefusalReason.transactionMismatch)
        #expect(Self.reason(Self.check(wrongToken, requestedQuantity: 2)) == RefusalReason.accountMismatch)
    }

    @Test(.timeLimit(.minutes(1)))
    func detailsHoldNoTokens() throws {
        let payload = try Self.payload()
        guard case .failure(let error) = Self.check(payload, userID: "user-43") else {
            Issue.record("a foreign token was accepted")
            return
        }
        #expect(!error.detail.contains(Self.userToken))
        #expect(!error.detail.contains("user-43"))
        #expect(error.description == "account_mismatch: \(error.detail)")
    }

    /// The whole path the service takes: a signed token, verified, then checked.
    @Test(.timeLimit(.minutes(1)))
    func aVerifiedTransactionGoesThroughThePolicy() throws {
        let store = try FakeAppStore()
        var transaction = FakeAppStore.transaction()
        transaction["appAccountToken"] = Self.userToken
        transaction["quantity"] = 2
        let verified = try store.verifier().verifyTransaction(store.sign(transaction))
        let policy = CreditPolicy(accountTokenNamespace: Self.namespace, requireAccountToken: true)
        let quantity = try policy.check(
            verified, flowNo: Self.flowNo, productID: Self.productID, userID: Self.userID, requestedQuantity: 2
        )
        #expect(quantity == 2)
        #expect(throws: PolicyError.self) {
            try policy.check(verified, flowNo: Self.flowNo, productID: Self.productID, userID: "user-7", requestedQuantity: nil)
        }
    }
}
