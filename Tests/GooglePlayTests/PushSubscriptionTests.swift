import Foundation
import GooglePlay
import StoreHTTP
import Testing
import TestSupport
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// Reading the push subscription from the fake Pub/Sub, with a token for
/// Pub/Sub's scope from the fake token endpoint.
@Suite(.timeLimit(.minutes(1)))
struct PushSubscriptionTests {
    static let name = "projects/\(FakeGooglePlay.projectID)/subscriptions/play-rtdn-push"
    static let endpoint = "https://wallet.example.com/v1/googleplay/notifications"
    static let email = "play-push@test-project.iam.gserviceaccount.com"

    @Test func aSubscriptionIsReadWithAPubSubToken() throws {
        let fake = try FakeGooglePlay()
        defer { fake.stop() }
        fake.setSubscription(.init(name: Self.name, pushEndpoint: Self.endpoint, serviceAccountEmail: Self.email,
                                   audience: "wallet-push"))
        let client = PubSubClient(apiURL: fake.pubSubURL, timeoutSeconds: 5, account: fake.account)
        let subscription = try client.subscription(Self.name, deadline: client.deadline())
        #expect(subscription.name == Self.name)
        #expect(subscription.topic == "projects/\(FakeGooglePlay.projectID)/topics/play-rtdn")
        #expect(subscription.pushConfig?.pushEndpoint == Self.endpoint)
        #expect(subscription.pushConfig?.oidcToken?.serviceAccountEmail == Self.email)
        #expect(subscription.pushConfig?.oidcToken?.audience == "wallet-push")
        #expect(subscription.tokenAudience == "wallet-push")
        #expect(fake.received.map(\.path) == ["/token", "/v1/\(Self.name)"])
        #expect(fake.received.allSatisfy { $0.authorized })
    }

    /// Without an audience of its own, a push token carries the endpoint.
    @Test func theAudienceDefaultsToThePushEndpoint() throws {
        let fake = try FakeGooglePlay()
        defer { fake.stop() }
        fake.setSubscription(.init(name: Self.name, pushEndpoint: Self.endpoint, serviceAccountEmail: Self.email,
                                   audience: nil))
        let client = PubSubClient(apiURL: fake.pubSubURL, timeoutSeconds: 5, account: fake.account)
        #expect(try client.subscription(Self.name, deadline: client.deadline()).tokenAudience == Self.endpoint)
    }

    @Test func anUnknownSubscriptionIsNotFound() throws {
        let fake = try FakeGooglePlay()
        defer { fake.stop() }
        let client = PubSubClient(apiURL: fake.pubSubURL, timeoutSeconds: 5, account: fake.account)
        #expect(throws: PlayAPIError.notFound) { try client.subscription(Self.name, deadline: client.deadline()) }
    }

    /// Google checks a token's scope: an Android Publisher token does not
    /// read a subscription, nor a Pub/Sub token a purchase.
    @Test func eachAPIWantsATokenForItsScope() throws {
        let fake = try FakeGooglePlay()
        defer { fake.stop() }
        fake.setSubscription(.init(name: Self.name, pushEndpoint: Self.endpoint, serviceAccountEmail: Self.email,
                                   audience: nil))
        let publisherToken = try AccessTokens(account: fake.account).token(deadline: .now + .seconds(5))
        let pubSubToken = try AccessTokens(account: fake.account, scope: PubSubClient.scope).token(deadline: .now + .seconds(5))
        func status(_ path: String, _ token: String) throws -> Int {
            var request = URLRequest(url: fake.apiURL.appendingPathComponent(path))
            request.setValue("Bearer " + token, forHTTPHeaderField: "Authorization")
            let answer = RetryingCall.send(name: "test", responseBytesMax: 1 << 16, deadline: .now + .seconds(5),
                                           observe: { _, _ in }) { request }
            guard case .final(let status, _) = answer else { throw PlayAPIError.unavailable("no answer") }
            return status
        }
        let purchase = "/androidpublisher/v3/applications/\(fake.packageName)/purchases/products/guodong600/tokens/t1"
        #expect(try status("/v1/\(Self.name)", publisherToken) == 403)
        #expect(try status("/v1/\(Self.name)", pubSubToken) == 200)
        #expect(try status(purchase, pubSubToken) == 403)
        #expect(try status(purchase, publisherToken) == 404)
    }

    @Test func subscriptionNamesArePubSubsFullNames() {
        for name in [Self.name, "projects/example.com:game/subscriptions/R.t~d+n%1"] {
            #expect(PubSubClient.isSubscriptionName(name), "\(name)")
        }
        for name in ["play-rtdn-push", "projects/p/topics/play", "projects//subscriptions/play", "projects/p/subscriptions/goog1",
                     "projects/p/subscriptions/1ab", "projects/p/subscriptions/ab", "projects/P/subscriptions/play",
                     "projects/p/subscriptions/pl ay", "projects/p/subscriptions/play/x",
                     "projects/p/subscriptions/" + String(repeating: "a", count: 256)] {
            #expect(!PubSubClient.isSubscriptionName(name), "\(name)")
        }
    }
}
