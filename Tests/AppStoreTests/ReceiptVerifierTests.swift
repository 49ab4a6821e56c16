import AppStore
import Foundation
import TestSupport
import Testing
import WalletCore
#if canImport(Glibc)
import Glibc
#endif

/// The receipt client against fake verifyReceipt servers on loopback sockets.
@Suite struct ReceiptVerifierTests {
    static let bundleID = "com.example.coins"
    static let transactionID = "1000000123456789"
    static let productID = "coins.1000"
    static let receiptData = "MIIT1QYJKoZIhvcNAQcCoIITxjCCE8ICAQExCzAJBgUrDgMCGgUAMIIDdgYJ/+base64"
    static let sharedSecret = "0123456789abcdef0123456789abcdef"

    // MARK: - Canned answers

    static func entry(
        transactionID: String = transactionID,
        productID: String = productID,
        quantity: Any? = "1",
        extra: [String: Any] = [:]
    ) -> [String: Any] {
        var entry: [String: Any] = [
            "transaction_id": transactionID,
            "original_transaction_id": transactionID,
            "product_id": productID,
            "purchase_date_ms": "1700000000000",
            "in_app_ownership_type": "PURCHASED",
        ]
        if let quantity { entry["quantity"] = quantity }
        entry.merge(extra) { _, new in new }
        return entry
    }

    static func answer(
        status: Int = 0,
        environment: String = "Production",
        bundleID: String? = bundleID,
        inApp: [[String: Any]] = [entry()],
        latestReceiptInfo: [[String: Any]]? = nil,
        extra: [String: Any] = [:]
    ) -> FakeVerifyReceiptServer.Reply {
        var receipt: [String: Any] = [
            "receipt_type": environment == "Sandbox" ? "ProductionSandbox" : "Production",
            "application_version": "42",
            "in_app": inApp,
        ]
        if let bundleID { receipt["bundle_id"] = bundleID }
        var object: [String: Any] = ["status": status, "environment": environment, "receipt": receipt]
        if let latestReceiptInfo { object["latest_receipt_info"] = latestReceiptInfo }
        object.merge(extra) { _, new in new }
        return .json(json(object))
    }

    static func status(_ status: Int, extra: [String: Any] = [:]) -> FakeVerifyReceiptServer.Reply {
        var object: [String: Any] = ["status": status]
        object.merge(extra) { _, new in new }
        return .json(json(object))
    }

    static func json(_ object: [String: Any]) -> String {
        String(decoding: try! JSONSerialization.data(withJSONObject: object, options: [.sortedKeys]), as: UTF8.self)
    }

    // MARK: - Harness

    /// A production server, a sandbox server and a verifier pointed at them;
    /// both servers stop when `body` returns.
    static func withServers<T>(
        production: FakeVerifyReceiptServer.Reply,
        sandbox: FakeVerifyReceiptServer.Reply = .http(status: 500, body: "the sandbox should not be asked"),
        sharedSecret: String? = sharedSecret,
        allowSandbox: Bool = true,
        timeoutSeconds: Double = 10,
        responseBytesMax: Int = 4 << 20,
        _ body: (ReceiptVerifier, FakeVerifyReceiptServer, FakeVerifyReceiptServer) throws -> T
    ) throws -> T {
        let productionServer = try FakeVerifyReceiptServer(reply: production)
        defer { productionServer.stop() }
        let sandboxServer = try FakeVerifyReceiptServer(reply: sandbox)
        defer { sandboxServer.stop() }
        let verifier = ReceiptVerifier(configuration: .init(
            productionURL: productionServer.url, sandboxURL: sandboxServer.url, sharedSecret: sharedSecret,
            bundleIDs: [bundleID], allowSandbox: allowSandbox, timeoutSeconds: timeoutSeconds,
            responseBytesMax: responseBytesMax
        ))
        return try body(verifier, productionServer, sandboxServer)
    }

    static func outcome(
        _ verifier: ReceiptVerifier,
        transactionID: String = transactionID,
        productID: String = productID
    ) -> Result<ReceiptVerifier.VerifiedReceiptPurchase, ReceiptError> {
        Result { () throws(ReceiptError) -> ReceiptVerifier.VerifiedReceiptPurchase in
            try verifier.verify(receiptData: receiptData, transactionID: transactionID, productID: productID)
        }
    }

    /// The refusal reason, nil for success, "unavailable" for unavailable.
    static func reason(_ result: Result<ReceiptVerifier.VerifiedReceiptPurchase, ReceiptError>) -> String? {
        switch result {
        case .success: nil
        case .failure(.unavailable): "unavailable"
        case .failure(.failed(let reason, _)): reason.rawValue
        }
    }

    static func refusal(
        production: FakeVerifyReceiptServer.Reply,
        allowSandbox: Bool = true,
        transactionID: String = transactionID,
        productID: String = productID
    ) throws -> String? {
        try withServers(production: production, allowSandbox: allowSandbox) { verifier, _, _ in
            reason(outcome(verifier, transactionID: transactionID, productID: productID))
        }
    }

    // MARK: - Accepted receipts

    @Test(.timeLimit(.minutes(1)))
    func aValidProductionReceiptProvesThePurchase() throws {
        try Self.withServers(production: Self.answer()) { verifier, production, sandbox in
            let purchase = try Self.outcome(verifier).get()
            #expect(purchase == ReceiptVerifier.VerifiedReceiptPurchase(
                transactionID: Self.transactionID, productID: Self.productID, quantity: 1, environment: .production
            ))
            #expect(sandbox.requests.isEmpty)
            let requests = production.requests
            try #require(requests.count == 1)
            let request = requests[0]
            #expect(request.method == "POST")
            #expect(request.path == "/verifyReceipt")
            #expect(request.headers["content-type"] == "application/json")
            let body = try #require(request.json)
            #expect(body["receipt-data"] as? String == Self.receiptData)
            #expect(body["password"] as? String == Self.sharedSecret)
            #expect(body.count == 3)
            // `false`, not 0: Apple reads a JSON Boolean.
            let rawBody = String(decoding: request.body, as: UTF8.self)
            #expect(rawBody.contains("\"exclude-old-transactions\":false"))
            // In the order Apple's documentation lists the members.
            #expect(rawBody == #"{"receipt-data":"\#(Self.receiptData)","password":"\#(Self.sharedSecret)","#
                + #""exclude-old-transactions":false}"#)
        }
    }

    @Test(.timeLimit(.minutes(1)))
    func withoutASharedSecretNoPasswordIsSent() throws {
        try Self.withServers(production: Self.answer(), sharedSecret: nil) { verifier, production, _ in
            _ = try Self.outcome(verifier).get()
            let body = try #require(production.requests.first?.json)
            #expect(body["password"] == nil)
            #expect(body["receipt-data"] as? String == Self.receiptData)
        }
    }

    @Test(.timeLimit(.minutes(1)))
    func aSandboxReceiptIsRetriedOnceAgainstTheSandbox() throws {
        try Self.withServers(
            production: Self.status(21007), sandbox: Self.answer(environment: "Sandbox")
        ) { verifier, production, sandbox in
            let purchase = try Self.outcome(verifier).get()
            #expect(purchase.environment == .sandbox)
            #expect(purchase.transactionID == Self.transactionID)
            #expect(production.requests.count == 1)
            let requests = sandbox.requests
            try #require(requests.count == 1)
            let body = try #require(requests[0].json)
            #expect(body["password"] as? String == Self.sharedSecret)
            #expect(body["receipt-data"] as? String == Self.receiptData)
        }
    }

    @Test(.timeLimit(.minutes(1)))
    func theSandboxIsAskedOnlyOnce() throws {
        try Self.withServers(production: Self.status(21007), sandbox: Self.status(21007)) { verifier, production, sandbox in
            #expect(Self.reason(Self.outcome(verifier)) == RefusalReason.receiptInvalid.rawValue)
            #expect(production.requests.count == 1)
            #expect(sandbox.requests.count == 1)
        }
    }

    @Test(.timeLimit(.minutes(1)))
    func aSandboxReceiptIsRefusedWhenTheSandboxIsNotAllowed() throws {
        try Self.withServers(
            production: Self.status(21007), sandbox: Self.answer(environment: "Sandbox"), allowSandbox: false
        ) { verifier, _, sandbox in
            #expect(Self.reason(Self.outcome(verifier)) == RefusalReason.environmentNotAllowed.rawValue)
            #expect(sandbox.requests.isEmpty)
        }
    }

    @Test(.timeLimit(.minutes(1)))
    func theQuantityIsReadFromItsString() throws {
        let answer = Self.answer(inApp: [Self.entry(quantity: "3")])
        try Self.withServers(production: answer) { verifier, _, _ in
            let purchase = try Self.outcome(verifier).get()
            #expect(purchase.quantity == 3)
        }
        let numeric = Self.answer(inApp: [Self.entry(quantity: 10)])
        try Self.withServers(production: numeric) { verifier, _, _ in
            let purchase = try Self.outcome(verifier).get()
            #expect(purchase.quantity == 10)
        }
        let absent = Self.answer(inApp: [Self.entry(quantity: nil)])
        try Self.withServers(production: absent) { verifier, _, _ in
            let purchase = try Self.outcome(verifier).get()
            #expect(purchase.quantity == 1)
        }
    }

    @Test(.timeLimit(.minutes(1)))
    func theTransactionIsFoundAmongOthersAndInLatestReceiptInfo() throws {
        let others = [Self.entry(transactionID: "1000000000000001"), Self.entry(transactionID: "1000000000000002")]
        try Self.withServers(production: Self.answer(inApp: others + [Self.entry()])) { verifier, _, _ in
            let purchase = try Self.outcome(verifier).get()
            #expect(purchase.transactionID == Self.transactionID)
        }
        try Self.withServers(production: Self.answer(inApp: others, latestReceiptInfo: [Self.entry()])) { verifier, _, _ in
            let purchase = try Self.outcome(verifier).get()
            #expect(purchase.transactionID == Self.transactionID)
        }
    }

    // MARK: - Refused receipts

    @Test(.timeLimit(.minutes(1)))
    func anotherBundleIsRefused() throws {
        #expect(try Self.refusal(production: Self.answer(bundleID: "com.example.other")) == RefusalReason.bundleMismatch.rawValue)
        #expect(try Self.refusal(production: Self.answer(bundleID: nil)) == RefusalReason.bundleMismatch.rawValue)
    }

    @Test(.timeLimit(.minutes(1)))
    func aReceiptWithoutTheTransactionIsRefused() throws {
        let others = [Self.entry(transactionID: "1000000000000001")]
        #expect(try Self.refusal(production: Self.answer(inApp: others)) == RefusalReason.transactionMismatch.rawValue)
        #expect(try Self.refusal(production: Self.answer(inApp: [])) == RefusalReason.transactionMismatch.rawValue)
        // The original transaction ID does not count.
        let renewal = Self.entry(transactionID: "1000000000000003", extra: ["original_transaction_id": Self.transactionID])
        #expect(try Self.refusal(production: Self.answer(inApp: [renewal])) == RefusalReason.transactionMismatch.rawValue)
    }

    @Test(.timeLimit(.minutes(1)))
    func anotherProductIsRefused() throws {
        #expect(try Self.refusal(production: Self.answer(), productID: "coins.5000") == RefusalReason.productMismatch.rawValue)
        let inLatest = Self.answer(latestReceiptInfo: [Self.entry(productID: "coins.5000")])
        #expect(try Self.refusal(production: inLatest) == RefusalReason.productMismatch.rawValue)
    }

    @Test(.timeLimit(.minutes(1)))
    func aCancelledPurchaseIsRefused() throws {
        let cancelled = Self.entry(extra: [
            "cancellation_date": "2023-11-15 10:00:00 Etc/GMT", "cancellation_date_ms": "1700042400000",
            "cancellation_reason": "0",
        ])
        #expect(try Self.refusal(production: Self.answer(inApp: [cancelled])) == RefusalReason.revoked.rawValue)
        // A cancellation that only latest_receipt_info shows still counts.
        let onlyInLatest = Self.answer(inApp: [Self.entry()], latestReceiptInfo: [cancelled])
        #expect(try Self.refusal(production: onlyInLatest) == RefusalReason.revoked.rawValue)
    }

    @Test(.timeLimit(.minutes(1)))
    func quantitiesOutsideApplesRangeAreMalformed() throws {
        for quantity: Any in ["0", "11", "x", "", "+1", " 1", "1.0", 0, 11, 1.5, true] {
            let answer = Self.answer(inApp: [Self.entry(quantity: quantity)])
            #expect(try Self.refusal(production: answer) == RefusalReason.malformed.rawValue, "quantity \(quantity)")
        }
        let disagreeing = Self.answer(inApp: [Self.entry(quantity: "1")], latestReceiptInfo: [Self.entry(quantity: "2")])
        #expect(try Self.refusal(production: disagreeing) == RefusalReason.malformed.rawValue)
    }

    @Test(.timeLimit(.minutes(1)))
    func otherStatusesRefuseTheReceipt() throws {
        for status in [21000, 21002, 21003, 21004, 21006, 21008, 21010, 1] {
            try Self.withServers(production: Self.status(status)) { verifier, _, sandbox in
                let result = Self.outcome(verifier)
                guard case .failure(.failed(let reason, let detail)) = result else {
                    Issue.record("status \(status) gave \(result)")
                    return
                }
                #expect(reason == RefusalReason.receiptInvalid)
                #expect(detail.contains("status \(status)"))
                #expect(sandbox.requests.isEmpty)
            }
        }
        #expect(try Self.refusal(production: Self.status(21100, extra: ["is-retryable": false])) == RefusalReason.receiptInvalid.rawValue)
        #expect(try Self.refusal(production: Self.status(21150)) == RefusalReason.receiptInvalid.rawValue)
    }

    @Test(.timeLimit(.minutes(1)))
    func aValidStatusWithoutAReceiptIsRefused() throws {
        #expect(try Self.refusal(production: Self.status(0)) == RefusalReason.receiptInvalid.rawValue)
    }

    @Test(.timeLimit(.minutes(1)))
    func anEmptyOrHugeReceiptIsRefusedWithoutAsking() throws {
        try Self.withServers(production: Self.answer()) { verifier, production, _ in
            let empty = Result { () throws(ReceiptError) in
                try verifier.verify(receiptData: "", transactionID: Self.transactionID, productID: Self.productID)
            }
            #expect(Self.reason(empty) == RefusalReason.receiptInvalid.rawValue)
            let huge = String(repeating: "A", count: ReceiptVerifier.receiptDataBytesMax + 1)
            let tooLong = Result { () throws(ReceiptError) in
                try verifier.verify(receiptData: huge, transactionID: Self.transactionID, productID: Self.productID)
            }
            #expect(Self.reason(tooLong) == RefusalReason.receiptInvalid.rawValue)
            #expect(production.requests.isEmpty)
        }
    }

    // MARK: - Apple unavailable

    @Test(.timeLimit(.minutes(1)))
    func appleBeingUnableToAnswerIsUnavailable() throws {
        #expect(try Self.refusal(production: Self.status(21005)) == "unavailable")
        #expect(try Self.refusal(production: Self.status(21009)) == "unavailable")
        #expect(try Self.refusal(production: Self.status(21100, extra: ["is-retryable": true])) == "unavailable")
        #expect(try Self.refusal(production: Self.status(21199, extra: ["is-retryable": 1])) == "unavailable")
        // The same from the sandbox after a 21007, and the log detail says which.
        try Self.withServers(production: Self.status(21007), sandbox: Self.status(21005)) { verifier, _, _ in
            let result = Self.outcome(verifier)
            guard case .failure(.unavailable(let detail)) = result else {
                Issue.record("21005 from the sandbox gave \(result)")
                return
            }
            #expect(detail.hasPrefix("Sandbox:"))
        }
    }

    @Test(.timeLimit(.minutes(1)))
    func httpErrorsAndUnreadableAnswersAreUnavailable() throws {
        #expect(try Self.refusal(production: .http(status: 500, body: "{\"status\":0}")) == "unavailable")
        #expect(try Self.refusal(production: .http(status: 503, body: "")) == "unavailable")
        #expect(try Self.refusal(production: .http(status: 404, body: "not here")) == "unavailable")
        #expect(try Self.refusal(production: .json("<html>maintenance</html>")) == "unavailable")
        #expect(try Self.refusal(production: .json("[0]")) == "unavailable")
        #expect(try Self.refusal(production: .json("{\"status\":\"0\"}")) == "unavailable")
        #expect(try Self.refusal(production: .json("{\"status\":false}")) == "unavailable")
        #expect(try Self.refusal(production: .json("")) == "unavailable")
    }

    @Test(.timeLimit(.minutes(1)))
    func redirectsAreNotFollowed() throws {
        let elsewhere = try FakeVerifyReceiptServer(reply: Self.answer())
        defer { elsewhere.stop() }
        let redirect = FakeVerifyReceiptServer.Reply.http(
            status: 307, headers: ["Location: \(elsewhere.url.absoluteString)"], body: ""
        )
        #expect(try Self.refusal(production: redirect) == "unavailable")
        #expect(elsewhere.requests.isEmpty)
    }

    @Test(.timeLimit(.minutes(1)))
    func anOversizedAnswerIsUnavailable() throws {
        let padding = String(repeating: "x", count: 8 * 1024)
        let big = Self.answer(extra: ["padding": padding])
        try Self.withServers(production: big, responseBytesMax: 4 * 1024) { verifier, production, _ in
            #expect(Self.reason(Self.outcome(verifier)) == "unavailable")
            #expect(production.requests.count == 1)
        }
        // The same answer within the limit is read.
        try Self.withServers(production: big, responseBytesMax: 64 * 1024) { verifier, _, _ in
            let purchase = try Self.outcome(verifier).get()
            #expect(purchase.quantity == 1)
        }
    }

    /// Without a Content-Length the limit is applied while reading.
    @Test(.timeLimit(.minutes(1)))
    func anOversizedAnswerOfUnknownLengthIsCutOff() throws {
        guard case .json(let body) = Self.answer(extra: ["padding": String(repeating: "x", count: 8 * 1024)]) else {
            Issue.record("the canned answer is not JSON")
            return
        }
        let unannounced = FakeVerifyReceiptServer.Reply.raw(
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n" + body
        )
        try Self.withServers(production: unannounced, responseBytesMax: 4 * 1024) { verifier, _, _ in
            #expect(Self.reason(Self.outcome(verifier)) == "unavailable")
        }
        try Self.withServers(production: unannounced, responseBytesMax: 64 * 1024) { verifier, _, _ in
            let purchase = try Self.outcome(verifier).get()
            #expect(purchase.quantity == 1)
        }
    }

    @Test(.timeLimit(.minutes(1)))
    func aRefusedConnectionIsUnavailable() throws {
        // Bound but not listening: connections are refused, and the port
        // stays ours until the test ends.
        let (closedSocket, closedPort) = try FakeVerifyReceiptServer.bindLoopback(listen: false)
        defer { close(closedSocket) }
        let url = try #require(URL(string: "http://127.0.0.1:\(closedPort)/verifyReceipt"))
        let verifier = ReceiptVerifier(configuration: .init(
            productionURL: url, sandboxURL: url, bundleIDs: [Self.bundleID], allowSandbox: true, timeoutSeconds: 10
        ))
        let started = Date()
        let result = Self.outcome(verifier)
        guard case .failure(.unavailable) = result else {
            Issue.record("a refused connection gave \(result)")
            return
        }
        #expect(Date().timeIntervalSince(started) < 5)
    }

    /// URLSession's own time-outs sit seconds past the limit, so this checks
    /// the verifier's own deadline.
    @Test(.timeLimit(.minutes(1)))
    func aServerThatNeverAnswersIsUnavailableWithinTheTimeout() throws {
        try Self.withServers(production: .silence, timeoutSeconds: 1) { verifier, production, _ in
            let started = Date()
            let result = Self.outcome(verifier)
            let elapsed = Date().timeIntervalSince(started)
            guard case .failure(.unavailable) = result else {
                Issue.record("a silent server gave \(result)")
                return
            }
            #expect(elapsed >= 0.9)
            #expect(elapsed < 3)
            #expect(production.requests.count == 1)
        }
    }

    /// The time limit covers both requests, not each.
    @Test(.timeLimit(.minutes(1)))
    func theTimeLimitCoversTheSandboxRetry() throws {
        try Self.withServers(production: Self.status(21007), sandbox: .silence, timeoutSeconds: 1) { verifier, _, sandbox in
            let started = Date()
            let result = Self.outcome(verifier)
            let elapsed = Date().timeIntervalSince(started)
            guard case .failure(.unavailable) = result else {
                Issue.record("a silent sandbox gave \(result)")
                return
            }
            #expect(elapsed < 3)
            #expect(sandbox.requests.count == 1)
        }
    }

    @Test(.timeLimit(.minutes(1)))
    func errorsDescribeThemselves() {
        #expect(ReceiptError.failed(reason: .revoked, detail: "gone").description == "revoked: gone")
        #expect(ReceiptError.unavailable("HTTP status 503").description == "unavailable: HTTP status 503")
    }
}
