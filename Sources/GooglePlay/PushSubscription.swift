public import Foundation
public import Locking
import StoreHTTP

/// The members of Pub/Sub's `Subscription` resource that say where and how
/// the real-time developer notifications are pushed: its name and topic,
/// and of its `pushConfig` the endpoint and the OIDC token's service account
/// and audience. Other members are ignored.
/// https://cloud.google.com/pubsub/docs/reference/rest/v1/projects.subscriptions
public struct PushSubscription: Sendable, Equatable, Decodable {
    public struct PushConfig: Sendable, Equatable, Decodable {
        /// Where messages are pushed; absent for a pull subscription.
        public var pushEndpoint: String?
        /// Set when pushes are authenticated.
        public var oidcToken: OidcToken?
    }

    public struct OidcToken: Sendable, Equatable, Decodable {
        /// The service account the push tokens are signed as.
        public var serviceAccountEmail: String?
        /// The tokens' `aud`; Google uses the push endpoint when it is empty.
        public var audience: String?
    }

    public var name: String
    public var topic: String?
    public var pushConfig: PushConfig?

    /// The audience the push tokens carry: the configured one, or else the
    /// push endpoint, as Google documents.
    public var tokenAudience: String? {
        if let audience = pushConfig?.oidcToken?.audience, !audience.isEmpty { return audience }
        return pushConfig?.pushEndpoint
    }
}

/// Reads a Pub/Sub subscription (`projects.subscriptions.get`) with the
/// service account's access token for the Pub/Sub scope. The account needs
/// the `pubsub.subscriptions.get` permission, which the Pub/Sub Viewer role
/// grants. Calls follow the Android Publisher client's rules (`GoogleAPICall`).
public struct PubSubClient: Sendable {
    /// The OAuth scope `projects.subscriptions.get` accepts.
    public static let scope = "https://www.googleapis.com/auth/pubsub"
    public static let googleAPIURL = URL(string: "https://pubsub.googleapis.com")!
    /// Largest answer read; a subscription is well under a kilobyte.
    public static let responseBytesMax = 64 * 1024

    public let apiURL: URL
    public let timeoutSeconds: Double
    public let tokens: AccessTokens

    public init(apiURL: URL = Self.googleAPIURL, timeoutSeconds: Double, account: ServiceAccount,
                clock: any WorkClock = SystemClock()) {
        precondition(timeoutSeconds.isFinite && timeoutSeconds > 0, "PubSubClient timeoutSeconds must be positive and finite")
        self.apiURL = apiURL
        self.timeoutSeconds = timeoutSeconds
        tokens = AccessTokens(account: account, scope: Self.scope, clock: clock)
    }

    /// A deadline `timeoutSeconds` from now.
    public func deadline() -> ContinuousClock.Instant {
        .now + .seconds(timeoutSeconds)
    }

    /// The subscription `name` (`projects/P/subscriptions/S`).
    public func subscription(_ name: String, deadline: ContinuousClock.Instant) throws(PlayAPIError) -> PushSubscription {
        precondition(Self.isSubscriptionName(name), "not a subscription name")
        let path = "/v1/" + name.split(separator: "/").map { RetryingCall.percentEncoded(String($0)) }.joined(separator: "/")
        let body = try GoogleAPICall.send(name: "get_subscription", method: "GET", base: apiURL, path: path, tokens: tokens,
                                          responseBytesMax: Self.responseBytesMax, deadline: deadline,
                                          observe: { _, _ in })
        do {
            return try JSONDecoder().decode(PushSubscription.self, from: body)
        } catch {
            throw .malformedAnswer("the subscription does not decode (\(PlayClient.decodingProblem(error)))")
        }
    }

    /// `projects/{project}/subscriptions/{subscription}`, as Pub/Sub names
    /// them: a project id of lowercase letters, digits and hyphens (with a
    /// `domain:` prefix for older projects), and a subscription id of 3 to
    /// 255 letters, digits, `-_.~+%`, starting with a letter and not with
    /// `goog`.
    public static func isSubscriptionName(_ text: String) -> Bool {
        let parts = text.split(separator: "/", omittingEmptySubsequences: false)
        guard parts.count == 4, parts[0] == "projects", parts[2] == "subscriptions" else { return false }
        let project = parts[1], subscription = parts[3]
        let projectCharacters = Set("abcdefghijklmnopqrstuvwxyz0123456789-.:")
        let subscriptionCharacters = Set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.~+%")
        return (1...100).contains(project.count) && project.allSatisfy(projectCharacters.contains)
            && (3...255).contains(subscription.count) && subscription.allSatisfy(subscriptionCharacters.contains)
            && subscription.first?.isLetter == true && !subscription.lowercased().hasPrefix("goog")
    }
}
