import Foundation
import GooglePlay
import StoreHTTP
import Testing
import TestSupport
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

@Suite(.timeLimit(.minutes(1)))
struct PlayClientTests {
    private static let productsPath = "/androidpublisher/v3/applications/com.example.coins/purchases/products/"

    @Test func aPurchaseIsDecodedFromGooglesJSON() throws {
        let rig = try PlayRig()
        defer { rig.stop() }
        var purchase = FakeGooglePlay.Purchase.purchased(orderId: "GPA.1111-2222-3333-44444", quantity: 3,
                                                         accountID: "ab12")
        purchase.purchaseTimeMillis = 1_760_000_123_456
        purchase.refundableQuantity = 3
        rig.fake.setPurchase(productID: "coins_100", token: "t1", purchase)
        let answer = try rig.client.productPurchase(productID: "coins_100", token: "t1", deadline: rig.client.deadline())
        #expect(answer == ProductPurchase(
            purchaseState: 0, consumptionState: 0, purchaseType: nil, orderId: "GPA.1111-2222-3333-44444", quantity: 3,
            obfuscatedExternalAccountId: "ab12", purchaseTimeMillis: 1_760_000_123_456, acknowledgementState: 0,
            regionCode: "US", refundableQuantity: 3, productId: "coins_100"))
        let request = try #require(rig.apiRequests.first)
        #expect(request.method == "GET")
        #expect(request.path == Self.productsPath + "coins_100/tokens/t1")

        rig.fake.setPurchase(productID: "coins_100", token: "t2", .promo())
        let promo = try rig.client.productPurchase(productID: "coins_100", token: "t2", deadline: rig.client.deadline())
        #expect(promo.purchaseType == 1)
        #expect(promo.orderId == nil)
        #expect(promo.quantity == nil)
    }

    @Test func pathSegmentsArePercentEncoded() throws {
        let rig = try PlayRig()
        defer { rig.stop() }
        let token = "ab/c d+e?f#g%h"
        rig.fake.setPurchase(productID: "coins 100", token: token, .purchased())
        _ = try rig.client.productPurchase(productID: "coins 100", token: token, deadline: rig.client.deadline())
        try rig.client.consume(productID: "coins 100", token: token, deadline: rig.client.deadline())
        #expect(rig.fake.consumed.map(\.token) == [token])
        #expect(rig.fake.consumed.map(\.productID) == ["coins 100"])
    }

    @Test func anUnknownOrGoneTokenIsNotFound() throws {
        let rig = try PlayRig()
        defer { rig.stop() }
        rig.fake.setGone(productID: "coins_100", token: "old")
        for token in ["unknown", "old"] {
            let error = playError {
                _ = try rig.client.productPurchase(productID: "coins_100", token: token, deadline: rig.client.deadline())
            }
            #expect(error == .notFound)
            let consumeError = playError {
                try rig.client.consume(productID: "coins_100", token: token, deadline: rig.client.deadline())
            }
            #expect(consumeError == .notFound)
        }
        // Final: one request each.
        #expect(rig.apiRequests.count == 4)
    }

    @Test func a429IsWaitedOutWithinTheDeadline() throws {
        let rig = try PlayRig(timeoutSeconds: 5)
        defer { rig.stop() }
        rig.fake.setPurchase(productID: "coins_100", token: "t1", .purchased())
        rig.fake.fail(.google(429, reason: "rateLimitExceeded", retryAfter: "1", pathContaining: "/tokens/"), count: 1)
        let purchase = try rig.client.productPurchase(productID: "coins_100", token: "t1", deadline: rig.client.deadline())
        #expect(purchase.purchaseState == 0)
        // The pause is Google's Retry-After, on the client's clock.
        #expect(rig.clock.waitsRequested == [.seconds(1)])
        #expect(rig.apiRequests.count == 2)
        #expect(rig.fake.tokenGrants == 1)
    }

    @Test func fiveHundredsUntilTheDeadlineAreUnavailable() throws {
        let rig = try PlayRig(timeoutSeconds: 2)
        defer { rig.stop() }
        rig.fake.setPurchase(productID: "coins_100", token: "t1", .purchased())
        rig.fake.fail(.google(500, reason: "backendError", pathContaining: "/tokens/"), count: 1_000)
        let error = playError {
            _ = try rig.client.productPurchase(productID: "coins_100", token: "t1", deadline: rig.client.deadline())
        }
        guard case .unavailable(let detail)? = error else {
            Issue.record("expected unavailable, got \(String(describing: error))")
            return
        }
        #expect(detail == "get_product_purchase: HTTP status 500")
        // Pauses doubling from a quarter of a second while the next one still
        // ends inside the two seconds: 0.25 + 0.5 + 1, and a 2 would not.
        #expect(rig.clock.waitsRequested == [.milliseconds(250), .milliseconds(500), .seconds(1)])
        #expect(rig.apiRequests.count == 4)
    }

    @Test func otherStatusesAreRefusedWithGooglesReason() throws {
        let rig = try PlayRig()
        defer { rig.stop() }
        rig.fake.setPurchase(productID: "coins_100", token: "t1", .purchased())
        rig.fake.fail(.google(403, reason: "permissionDenied", pathContaining: "/tokens/"), count: 1)
        var error = playError {
            _ = try rig.client.productPurchase(productID: "coins_100", token: "t1", deadline: rig.client.deadline())
        }
        #expect(error == .refused(status: 403, reason: "permissionDenied"))
        // A reason that is not one word is not repeated.
        rig.fake.fail(.init(status: 400, body: #"{"error":{"errors":[{"reason":"two words <b>"}]}}"#,
                            pathContaining: "/tokens/"), count: 1)
        error = playError {
            _ = try rig.client.productPurchase(productID: "coins_100", token: "t1", deadline: rig.client.deadline())
        }
        #expect(error == .refused(status: 400, reason: nil))
        // Google's newer shape, with only a status.
        rig.fake.fail(.init(status: 400, body: #"{"error":{"code":400,"status":"INVALID_ARGUMENT"}}"#,
                            pathContaining: "/tokens/"), count: 1)
        error = playError {
            _ = try rig.client.productPurchase(productID: "coins_100", token: "t1", deadline: rig.client.deadline())
        }
        #expect(error == .refused(status: 400, reason: "INVALID_ARGUMENT"))
    }

    @Test func anAnswerOutsideGooglesShapeIsMalformed() throws {
        let rig = try PlayRig()
        defer { rig.stop() }
        let bodies = [
            #"{"purchaseState":"zero"}"#, #"{"consumptionState":0}"#, #"[]"#, #"not json"#,
            #"{"purchaseState":0,"purchaseTimeMillis":"soon"}"#,
        ]
        for (index, body) in bodies.enumerated() {
            rig.fake.setPurchaseJSON(productID: "coins_100", token: "secret-token-\(index)", body)
            let error = playError {
                _ = try rig.client.productPurchase(productID: "coins_100", token: "secret-token-\(index)",
                                                   deadline: rig.client.deadline())
            }
            guard case .malformedAnswer(let detail)? = error else {
                Issue.record("case \(index): \(String(describing: error))")
                continue
            }
            #expect(!detail.contains("secret-token"))
            #expect(!detail.contains("zero") && !detail.contains("soon"))
        }
    }

    @Test func errorsNeverNameTheTokens() throws {
        let rig = try PlayRig(timeoutSeconds: 1)
        defer { rig.stop() }
        let purchaseToken = "purchase-token-that-is-secret"
        rig.fake.fail(.google(400, reason: "invalid", pathContaining: "/tokens/"), count: 1)
        rig.fake.fail(.google(503, reason: "backendError", pathContaining: "/tokens/"), count: 1_000)
        var errors: [PlayAPIError] = []
        for _ in 0..<3 {
            if let error = playError({
                _ = try rig.client.productPurchase(productID: "coins_100", token: purchaseToken,
                                                   deadline: rig.client.deadline())
            }) { errors.append(error) }
        }
        rig.fake.clearFailures()
        errors += [playError { try rig.client.consume(productID: "p", token: purchaseToken, deadline: rig.client.deadline()) }]
            .compactMap { $0 }
        let accessToken = try rig.client.tokens.token(deadline: rig.client.deadline())
        #expect(errors.count == 4)
        for error in errors {
            for text in ["\(error)", String(reflecting: error)] {
                #expect(!text.contains(purchaseToken))
                #expect(!text.contains(accessToken))
                #expect(!text.contains("ya29"))
            }
        }
    }

    @Test func consumeMarksThePurchaseConsumedOnce() throws {
        let rig = try PlayRig()
        defer { rig.stop() }
        rig.fake.setPurchase(productID: "coins_100", token: "t1", .purchased())
        try rig.client.consume(productID: "coins_100", token: "t1", deadline: rig.client.deadline())
        #expect(rig.fake.consumed.map(\.token) == ["t1"])
        let request = try #require(rig.apiRequests.last)
        #expect(request.method == "POST")
        #expect(request.path == Self.productsPath + "coins_100/tokens/t1:consume")
        let after = try rig.client.productPurchase(productID: "coins_100", token: "t1", deadline: rig.client.deadline())
        #expect(after.consumptionState == 1)

        // Consuming again is what Google refuses.
        let again = playError { try rig.client.consume(productID: "coins_100", token: "t1", deadline: rig.client.deadline()) }
        #expect(again == .refused(status: 400, reason: "productNotOwnedByUser"))
        #expect(rig.fake.consumed.count == 1)

        // A scripted answer.
        rig.fake.setPurchase(productID: "coins_100", token: "t2", .purchased())
        rig.fake.fail(.google(409, reason: "conflict", pathContaining: ":consume"), count: 1)
        let scripted = playError { try rig.client.consume(productID: "coins_100", token: "t2", deadline: rig.client.deadline()) }
        #expect(scripted == .refused(status: 409, reason: "conflict"))
        #expect(rig.fake.purchase(productID: "coins_100", token: "t2")?.consumptionState == 0)
    }

    @Test func voidedPurchasesArePagedAndIncludePartialRefunds() throws {
        let rig = try PlayRig()
        defer { rig.stop() }
        let now = Int64(Date().timeIntervalSince1970 * 1000)
        let hour: Int64 = 3_600_000
        for index in 0..<5 {
            rig.fake.addVoided(.init(purchaseToken: "v\(index)", orderId: "GPA.0000-0000-0000-0000\(index)",
                                     voidedTimeMillis: now - Int64(20 - index) * hour))
        }
        rig.fake.addVoided(.init(purchaseToken: "partial", orderId: "GPA.9", voidedTimeMillis: now - 2 * hour,
                                 voidedQuantity: 2))
        // Outside the window, and a subscription: neither is listed.
        rig.fake.addVoided(.init(purchaseToken: "early", orderId: "GPA.8", voidedTimeMillis: now - 30 * hour))
        rig.fake.addVoided(.init(purchaseToken: "subscription", orderId: "GPA.7", voidedTimeMillis: now - hour,
                                 isSubscription: true))

        let start = Date(timeIntervalSince1970: Double(now - 24 * hour) / 1000)
        var pageToken: String?
        var pages: [VoidedPage] = []
        repeat {
            let page = try rig.client.voidedPurchases(startTime: start, endTime: nil, pageToken: pageToken,
                                                      deadline: rig.client.deadline())
            pages.append(page)
            pageToken = page.nextPageToken
        } while pageToken != nil && pages.count < 10
        #expect(pages.map(\.purchases.count) == [2, 2, 2])
        let all = pages.flatMap(\.purchases)
        #expect(all.map(\.purchaseToken) == ["v0", "v1", "v2", "v3", "v4", "partial"])
        let partial = try #require(all.last)
        #expect(partial.isPartial)
        #expect(partial.voidedQuantity == 2)
        #expect(partial.voidedTimeMillis == now - 2 * hour)
        #expect(all.first?.isPartial == false)
        #expect(all.first?.voidedQuantity == nil)
        #expect(all.first?.orderId == "GPA.0000-0000-0000-00000")
        #expect(!"\(partial)".contains("partial"))

        let queries = rig.apiRequests.map(\.query)
        #expect(queries.count == 3)
        #expect(queries[0]["startTime"] == String(now - 24 * hour))
        #expect(queries[0]["type"] == "0")
        #expect(queries[0]["includeQuantityBasedPartialRefund"] == "true")
        #expect(queries[0]["maxResults"] == "1000")
        #expect(queries[0]["endTime"] == nil && queries[0]["token"] == nil)
        #expect(queries[1]["token"] == pages[0].nextPageToken)
        #expect(queries[2]["token"] == pages[1].nextPageToken)
    }

    @Test func withoutTheFlagTheFakeLeavesPartialRefundsOut() throws {
        let fake = try FakeGooglePlay()
        defer { fake.stop() }
        let now = Int64(Date().timeIntervalSince1970 * 1000)
        fake.addVoided(.init(purchaseToken: "full", orderId: "GPA.1", voidedTimeMillis: now - 1_000))
        fake.addVoided(.init(purchaseToken: "partial", orderId: "GPA.2", voidedTimeMillis: now - 500, voidedQuantity: 1))
        let accessToken = try AccessTokens(account: fake.account).token(deadline: .now + .seconds(5))
        func list(_ query: String) throws -> (status: Int, tokens: [String]) {
            let url = try #require(URL(string: fake.apiURL.absoluteString
                + "/androidpublisher/v3/applications/com.example.coins/purchases/voidedpurchases?" + query))
            var request = URLRequest(url: url)
            request.setValue("Bearer " + accessToken, forHTTPHeaderField: "Authorization")
            guard case .response(let status, _, let body) = HTTPExchange.send(
                request, responseBytesMax: 1 << 20, deadline: .now + .seconds(5)) else {
                Issue.record("no answer")
                return (0, [])
            }
            if status == 200 {
                // Exactly the members Google documents for a VoidedPurchase.
                let object = try JSONSerialization.jsonObject(with: body) as? [String: Any]
                for entry in object?["voidedPurchases"] as? [[String: Any]] ?? [] {
                    #expect(Set(entry.keys).isSubset(of: Self.voidedPurchaseMembers), "\(entry.keys.sorted())")
                    #expect(entry["refundType"] == nil)
                }
            }
            let page = try? JSONDecoder().decode(VoidedPage.self, from: body)
            return (status, page?.purchases.map(\.purchaseToken) ?? [])
        }
        let start = now - 60_000
        #expect(try list("startTime=\(start)").tokens == ["full"])
        #expect(try list("startTime=\(start)&includeQuantityBasedPartialRefund=false").tokens == ["full"])
        #expect(try list("startTime=\(start)&includeQuantityBasedPartialRefund=true").tokens == ["full", "partial"])
        // What Google documents as out of range.
        #expect(try list("startTime=\(now - 31 * 86_400_000)").status == 400)
        #expect(try list("startTime=\(start)&endTime=\(now + 3_600_000)").status == 400)
        #expect(try list("startTime=\(start)&maxResults=1001").status == 400)
        #expect(try list("startTime=\(start)&token=made-up").status == 400)
    }

    /// purchases.voidedpurchases: the VoidedPurchase resource's members
    /// (https://developers.google.com/android-publisher/api-ref/rest/v3/purchases.voidedpurchases).
    static let voidedPurchaseMembers: Set<String> = [
        "kind", "purchaseToken", "purchaseTimeMillis", "voidedTimeMillis", "orderId", "voidedSource", "voidedReason",
        "voidedQuantity",
    ]

    @Test func anEntryTheLedgerCannotHoldIsRefusedAndTheRestOfThePageIsRead() throws {
        func entry(_ token: String = "tok", orderID: String? = "GPA.1", voided: String = "\"1764700000000\"",
                   quantity: String? = nil) -> String {
            var members = [#""kind":"androidpublisher#voidedPurchase""#, #""purchaseToken":"\#(token)""#,
                           #""purchaseTimeMillis":"1764600000000""#, #""voidedTimeMillis":\#(voided)"#,
                           #""voidedSource":0"#, #""voidedReason":1"#]
            if let orderID { members.append(#""orderId":"\#(orderID)""#) }
            if let quantity { members.append(#""voidedQuantity":\#(quantity)"#) }
            return "{" + members.joined(separator: ",") + "}"
        }
        let longestToken = String(repeating: "t", count: GooglePlay.purchaseTokenBytesMax)
        let entries = [
            entry("good-1"),
            entry(String(repeating: "t", count: GooglePlay.purchaseTokenBytesMax + 1)),
            entry(""),
            entry("has space"),
            entry(orderID: String(repeating: "1", count: GooglePlay.orderIDBytesMax + 1)),
            entry(voided: "\"253402300800000\""),
            entry(voided: "\"-1\""),
            entry(quantity: "0"),
            entry(quantity: "-3"),
            entry(quantity: "2147483648"),
            entry(quantity: "\"two\""),
            #"{"purchaseToken":"no-time"}"#,
            "7",
            entry(longestToken, orderID: String(repeating: "1", count: GooglePlay.orderIDBytesMax), quantity: "11"),
            entry("good-2", orderID: "", voided: "\"253402300799999\"", quantity: "2147483647"),
        ]
        let body = #"{"voidedPurchases":["# + entries.joined(separator: ",") + #"],"tokenPagination":{"nextPageToken":"n"}}"#
        let page = try JSONDecoder().decode(VoidedPage.self, from: Data(body.utf8))
        #expect(page.purchases.map(\.purchaseToken) == ["good-1", longestToken, "good-2"])
        #expect(page.purchases[1].voidedQuantity == 11, "more than a credit takes, but a void of it is recorded")
        #expect(page.purchases[2].orderId == nil, "an empty orderId is none")
        #expect(page.nextPageToken == "n")
        #expect(page.refused.map(\.index) == Array(1...12))
        #expect(page.refused.map(\.reason) == [
            "purchaseToken is empty, longer than 1024 bytes, or not visible ASCII",
            "purchaseToken is empty, longer than 1024 bytes, or not visible ASCII",
            "purchaseToken is empty, longer than 1024 bytes, or not visible ASCII",
            "orderId is longer than 128 bytes, or not visible ASCII",
            "voidedTimeMillis is before 1970 or after the year 9999",
            "voidedTimeMillis is before 1970 or after the year 9999",
            "voidedQuantity is below 1 or above 2147483647",
            "voidedQuantity is below 1 or above 2147483647",
            "voidedQuantity is below 1 or above 2147483647",
            "voidedQuantity has the wrong type",
            "no voidedTimeMillis",
            "not a JSON object",
        ])
        #expect(page.refused[0].voidedTimeMillis == 1_764_700_000_000)
        #expect(page.refused.allSatisfy { !$0.description.contains("ttttt") })
    }

    @Test func aPageThatNamesItselfAsNextIsMalformed() throws {
        let rig = try PlayRig()
        defer { rig.stop() }
        rig.fake.fail(.init(status: 200, body: #"{"tokenPagination":{"nextPageToken":"same"}}"#,
                            pathContaining: "/voidedpurchases"), count: 1)
        let error = playError {
            _ = try rig.client.voidedPurchases(startTime: Date(timeIntervalSinceNow: -60), endTime: nil,
                                               pageToken: "same", deadline: rig.client.deadline())
        }
        #expect(error == .malformedAnswer("the next page token is the current one"))
        // An empty list has no page token and no purchases.
        let empty = try rig.client.voidedPurchases(startTime: Date(timeIntervalSinceNow: -60), endTime: Date(),
                                                   pageToken: nil, deadline: rig.client.deadline())
        #expect(empty == VoidedPage(purchases: [], nextPageToken: nil))
    }

    @Test func everyExchangeIsObservedWithItsEndpointAndStatusClass() throws {
        #expect(PlayClient.Endpoint.allCases.map(\.rawValue)
            == ["get_product_purchase", "consume_product_purchase", "list_voided_purchases", "token"])
        #expect(PlayClient.StatusClass.allCases.map(\.rawValue) == ["2xx", "4xx", "5xx", "error"])

        let rig = try PlayRig()
        defer { rig.stop() }
        rig.fake.setPurchase(productID: "coins_100", token: "t1", .purchased())
        _ = try rig.client.productPurchase(productID: "coins_100", token: "t1", deadline: rig.client.deadline())
        _ = playError {
            _ = try rig.client.productPurchase(productID: "coins_100", token: "nope", deadline: rig.client.deadline())
        }
        rig.fake.fail(.google(503, reason: "backendError", pathContaining: ":consume"), count: 1)
        try rig.client.consume(productID: "coins_100", token: "t1", deadline: rig.client.deadline())
        _ = try rig.client.voidedPurchases(startTime: Date(timeIntervalSinceNow: -60), endTime: nil, pageToken: nil,
                                           deadline: rig.client.deadline())
        #expect(rig.observed.all == [
            .init(endpoint: .token, status: .success),
            .init(endpoint: .getProductPurchase, status: .success),
            .init(endpoint: .getProductPurchase, status: .clientError),
            .init(endpoint: .consumeProductPurchase, status: .serverError),
            .init(endpoint: .consumeProductPurchase, status: .success),
            .init(endpoint: .listVoidedPurchases, status: .success),
        ])

        // No answer at all: the API's address is closed.
        let closed = try FakeGooglePlay()
        closed.stop()
        let observed = Observations()
        var configuration = closed.configuration(timeoutSeconds: 0.6)
        configuration.packageName = rig.fake.packageName
        let client = PlayClient(configuration: configuration, tokens: rig.client.tokens) { endpoint, status, _ in
            observed.append(endpoint, status)
        }
        let error = playError {
            _ = try client.productPurchase(productID: "coins_100", token: "t1", deadline: client.deadline())
        }
        guard case .unavailable? = error else {
            Issue.record("expected unavailable, got \(String(describing: error))")
            return
        }
        #expect(!observed.all.isEmpty)
        #expect(observed.all.allSatisfy { $0 == .init(endpoint: .getProductPurchase, status: .error) })
    }
}
