import Crypto
import Foundation
import GooglePlay
import StoreHTTP
import Testing
import TestSupport

@Suite(.timeLimit(.minutes(1)))
struct AccessTokenTests {
    private static func decodeJSON(_ part: String) throws -> [String: Any] {
        let bytes = try #require(Base64URL.decode(part))
        return try #require(try JSONSerialization.jsonObject(with: Data(bytes)) as? [String: Any])
    }

    @Test func theAssertionCarriesTheDocumentedHeaderAndClaimsAndVerifies() throws {
        let key = RSAPrivateKey()
        let account = ServiceAccount(clientEmail: "wallet@p.iam.gserviceaccount.com", privateKey: key,
                                     tokenURI: URL(string: "https://oauth2.googleapis.com/token")!, privateKeyID: "k1")
        let now = Date(timeIntervalSince1970: 1_800_000_000.7)
        let assertion = try AccessTokens.assertion(for: account, now: now)
        let parts = assertion.split(separator: ".").map(String.init)
        try #require(parts.count == 3)
        let header = try Self.decodeJSON(parts[0])
        let claims = try Self.decodeJSON(parts[1])
        #expect(header["alg"] as? String == "RS256")
        #expect(header["typ"] as? String == "JWT")
        #expect(header["kid"] as? String == "k1")
        #expect(claims["iss"] as? String == "wallet@p.iam.gserviceaccount.com")
        #expect(claims["scope"] as? String == "https://www.googleapis.com/auth/androidpublisher")
        #expect(claims["aud"] as? String == "https://oauth2.googleapis.com/token")
        #expect((claims["iat"] as? NSNumber)?.int64Value == 1_800_000_000)
        #expect((claims["exp"] as? NSNumber)?.int64Value == 1_800_003_600)
        #expect(Set(claims.keys) == ["iss", "scope", "aud", "iat", "exp"])
        let signature = try #require(Base64URL.decode(parts[2]))
        let signingInput = Array("\(parts[0]).\(parts[1])".utf8)
        #expect(key.publicKey.verifyRS256(signature: signature, message: signingInput))
        #expect(!RSAPrivateKey().publicKey.verifyRS256(signature: signature, message: signingInput))

        let withoutID = ServiceAccount(clientEmail: account.clientEmail, privateKey: key, tokenURI: account.tokenURI,
                                       privateKeyID: nil)
        let bare = try AccessTokens.assertion(for: withoutID, now: now).split(separator: ".").map(String.init)
        #expect(try Self.decodeJSON(bare[0])["kid"] == nil)

        // The bytes too: members in key order, the slashes of URLs as they are.
        #expect(try Self.text(parts[0]) == #"{"alg":"RS256","kid":"k1","typ":"JWT"}"#)
        #expect(try Self.text(bare[0]) == #"{"alg":"RS256","typ":"JWT"}"#)
        #expect(try Self.text(parts[1]) == #"{"aud":"https://oauth2.googleapis.com/token","exp":1800003600,"#
            + #""iat":1800000000,"iss":"wallet@p.iam.gserviceaccount.com","#
            + #""scope":"https://www.googleapis.com/auth/androidpublisher"}"#)
    }

    private static func text(_ part: String) throws -> String {
        String(decoding: try #require(Base64URL.decode(part)), as: UTF8.self)
    }

    @Test func oneTokenServesManyCalls() throws {
        let rig = try PlayRig()
        defer { rig.stop() }
        rig.fake.setPurchase(productID: "coins_100", token: "t1", .purchased())
        for _ in 0..<3 {
            _ = try rig.client.productPurchase(productID: "coins_100", token: "t1", deadline: rig.client.deadline())
        }
        #expect(rig.fake.tokenGrants == 1)
        #expect(rig.fake.tokenRequests == 1)
        #expect(rig.apiRequests.count == 3)
        #expect(rig.apiRequests.allSatisfy { $0.authorized })
    }

    @Test func anExpiringTokenIsReplacedBeforeGoogleRefusesIt() throws {
        let rig = try PlayRig()
        defer { rig.stop() }
        rig.fake.setPurchase(productID: "coins_100", token: "t1", .purchased())
        // A two-second token is replaced after half its life, on the
        // client's clock.
        rig.fake.accessTokenSeconds = 2
        _ = try rig.client.productPurchase(productID: "coins_100", token: "t1", deadline: rig.client.deadline())
        #expect(rig.fake.tokenGrants == 1)
        rig.clock.advance(by: .milliseconds(999))
        _ = try rig.client.productPurchase(productID: "coins_100", token: "t1", deadline: rig.client.deadline())
        #expect(rig.fake.tokenGrants == 1, "still inside the first half of its life")
        rig.clock.advance(by: .milliseconds(1))
        _ = try rig.client.productPurchase(productID: "coins_100", token: "t1", deadline: rig.client.deadline())
        #expect(rig.fake.tokenGrants == 2)
        #expect(rig.apiRequests.count == 3)
        #expect(rig.apiRequests.allSatisfy { $0.authorized })
    }

    @Test func aRevokedTokenIsReplacedOnceAfterA401() throws {
        let rig = try PlayRig()
        defer { rig.stop() }
        rig.fake.setPurchase(productID: "coins_100", token: "t1", .purchased())
        _ = try rig.client.productPurchase(productID: "coins_100", token: "t1", deadline: rig.client.deadline())
        rig.fake.revokeAccessTokens()
        let purchase = try rig.client.productPurchase(productID: "coins_100", token: "t1", deadline: rig.client.deadline())
        #expect(purchase.purchaseState == 0)
        #expect(rig.fake.tokenGrants == 2)
        let requests = rig.apiRequests
        #expect(requests.map(\.authorized) == [true, false, true])
        #expect(requests[1].tokenProblem == "unknown token")
    }

    @Test func aSecond401IsFinal() throws {
        let rig = try PlayRig()
        defer { rig.stop() }
        rig.fake.setPurchase(productID: "coins_100", token: "t1", .purchased())
        rig.fake.fail(.google(401, reason: "authError", pathContaining: "/purchases/"), count: 10)
        let error = playError {
            _ = try rig.client.productPurchase(productID: "coins_100", token: "t1", deadline: rig.client.deadline())
        }
        #expect(error == .refused(status: 401, reason: "authError"))
        #expect(rig.apiRequests.count == 2)
        #expect(rig.fake.tokenGrants == 2)
    }

    @Test func aWrongKeyIsRefusedOnceAndNeverReachesTheAPI() throws {
        let fake = try FakeGooglePlay()
        defer { fake.stop() }
        fake.setPurchase(productID: "coins_100", token: "t1", .purchased())
        // The account's name and key id, another key: a deleted key looks so.
        let impostor = ServiceAccount(clientEmail: fake.account.clientEmail, privateKey: RSAPrivateKey(),
                                      tokenURI: fake.account.tokenURI, privateKeyID: fake.privateKeyID)
        let client = PlayClient(configuration: fake.configuration(), account: impostor)
        for round in 1...2 {
            let error = playError {
                _ = try client.productPurchase(productID: "coins_100", token: "t1", deadline: client.deadline())
            }
            #expect(error == .refused(status: 400, reason: "invalid_grant"))
            // One grant request per call: a refusal is final, and not kept.
            #expect(fake.tokenRequests == round)
        }
        #expect(fake.received.allSatisfy { $0.path == "/token" && $0.tokenProblem == "signature" })
        #expect(fake.tokenGrants == 0)
    }

    @Test func eachAssertionCheckOfTheFakeBites() throws {
        let fake = try FakeGooglePlay()
        defer { fake.stop() }
        let key = fake.account.privateKey
        let variants: [(ServiceAccount, String)] = [
            (ServiceAccount(clientEmail: "other@test-project.iam.gserviceaccount.com", privateKey: key,
                            tokenURI: fake.account.tokenURI, privateKeyID: fake.privateKeyID), "iss"),
            (ServiceAccount(clientEmail: FakeGooglePlay.clientEmail, privateKey: key,
                            tokenURI: fake.account.tokenURI, privateKeyID: "another-key"), "kid"),
            (ServiceAccount(clientEmail: FakeGooglePlay.clientEmail, privateKey: key,
                            tokenURI: URL(string: fake.account.tokenURI.absoluteString + "?x=1")!,
                            privateKeyID: fake.privateKeyID), "aud"),
        ]
        for (account, problem) in variants {
            let tokens = AccessTokens(account: account)
            #expect(throws: PlayAPIError.refused(status: 400, reason: "invalid_grant")) {
                try tokens.token(deadline: .now + .seconds(5))
            }
            #expect(fake.received.last?.tokenProblem == problem)
        }
        #expect(fake.tokenGrants == 0)
        _ = try AccessTokens(account: fake.account).token(deadline: .now + .seconds(5))
        #expect(fake.tokenGrants == 1)
    }

    @Test func aTokenEndpointThatIsDownIsUnavailable() throws {
        let rig = try PlayRig(timeoutSeconds: 1.5)
        defer { rig.stop() }
        rig.fake.setPurchase(productID: "coins_100", token: "t1", .purchased())
        rig.fake.fail(.init(status: 503, pathContaining: "/token"), count: 1_000)
        let start = ContinuousClock.now
        let error = playError {
            _ = try rig.client.productPurchase(productID: "coins_100", token: "t1", deadline: rig.client.deadline())
        }
        guard case .unavailable? = error else {
            Issue.record("expected unavailable, got \(String(describing: error))")
            return
        }
        #expect(secondsSince(start) < 3.5)
        #expect(rig.fake.tokenRequests >= 2)
        #expect(rig.apiRequests.isEmpty)
        // 503s, and perhaps an exchange cut off at the deadline.
        let observed = rig.observed.all
        #expect(observed.contains(.init(endpoint: .token, status: .serverError)))
        #expect(observed.allSatisfy { $0.endpoint == .token && [.serverError, .error].contains($0.status) })
    }

    @Test func anUnreachableTokenEndpointIsUnavailable() throws {
        let closed = try FakeGooglePlay()
        closed.stop()
        let tokens = AccessTokens(account: closed.account)
        let start = ContinuousClock.now
        let error = playError { _ = try tokens.token(deadline: .now + .seconds(1)) }
        guard case .unavailable? = error else {
            Issue.record("expected unavailable, got \(String(describing: error))")
            return
        }
        #expect(secondsSince(start) < 3)
    }

    @Test func aTokenAnswerOutsideOAuthsShapeIsMalformed() throws {
        let fake = try FakeGooglePlay()
        defer { fake.stop() }
        let answers = [
            #"{"expires_in":3599,"token_type":"Bearer"}"#,
            #"{"access_token":"ya29.a b","expires_in":3599,"token_type":"Bearer"}"#,
            #"{"access_token":"ya29.x","expires_in":0,"token_type":"Bearer"}"#,
            #"{"access_token":"ya29.x","expires_in":"3599","token_type":"Bearer"}"#,
            #"{"access_token":"ya29.x","expires_in":3599,"token_type":"MAC"}"#,
            #"not json"#,
        ]
        for (index, answer) in answers.enumerated() {
            fake.fail(.init(status: 200, body: answer, pathContaining: "/token"), count: 1)
            let error = playError { _ = try AccessTokens(account: fake.account).token(deadline: .now + .seconds(5)) }
            guard case .malformedAnswer? = error else {
                Issue.record("case \(index): \(String(describing: error))")
                continue
            }
        }
    }

    @Test func sixteenThreadsAtOnceShareOneGrant() throws {
        let rig = try PlayRig()
        defer { rig.stop() }
        rig.fake.setPurchase(productID: "coins_100", token: "t1", .purchased())
        let outcomes = Outcomes()
        let client = rig.client
        let finished = runOnThreads(16, timeoutSeconds: 30) { _ in
            outcomes.add(playError {
                _ = try client.productPurchase(productID: "coins_100", token: "t1", deadline: client.deadline())
            })
        }
        #expect(finished)
        #expect(outcomes.all.count == 16)
        #expect(outcomes.all.allSatisfy { $0 == nil })
        #expect(rig.fake.tokenGrants == 1)
        #expect(rig.fake.tokenRequests == 1)
        #expect(rig.apiRequests.count == 16)
    }

    @Test func aWaiterGivesUpAtItsOwnDeadlineWhileTheGrantGoesOn() throws {
        let fake = try FakeGooglePlay()
        defer { fake.stop() }
        // The first grant waits out a one-second Retry-After.
        fake.fail(.init(status: 429, retryAfter: "1", pathContaining: "/token"), count: 1)
        let tokens = AccessTokens(account: fake.account)
        let outcomes = Outcomes()
        let fetcher = Thread {
            outcomes.add(playError { _ = try tokens.token(deadline: .now + .seconds(5)) })
        }
        fetcher.start()
        #expect(waitFor(seconds: 5) { fake.tokenRequests == 1 })
        let start = ContinuousClock.now
        let error = playError { _ = try tokens.token(deadline: .now + .milliseconds(300)) }
        #expect(error == .unavailable("token: no access token within the time limit"))
        #expect(secondsSince(start) < 0.9)
        #expect(waitFor(seconds: 5) { outcomes.all.count == 1 })
        #expect(outcomes.all == [nil])
        #expect(fake.tokenGrants == 1)
        // The waiter's token is the fetcher's, kept.
        _ = try tokens.token(deadline: .now + .seconds(1))
        #expect(fake.tokenRequests == 2)
    }
}

/// Outcomes from many threads.
final class Outcomes: @unchecked Sendable {
    private let lock = NSLock()
    // Guarded by `lock`.
    private var outcomes: [PlayAPIError?] = []

    func add(_ outcome: PlayAPIError?) {
        lock.withLock { outcomes.append(outcome) }
    }

    var all: [PlayAPIError?] {
        lock.withLock { outcomes }
    }
}
