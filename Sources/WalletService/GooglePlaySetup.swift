import Foundation
package import GooglePlay
package import Locking
package import ServiceSupport
import StoreHTTP

/// Builds the Google Play client from the configuration.
package enum GooglePlaySetup {
    /// The Android Publisher API client, or nil when Google Play is not set
    /// up.
    package static func client(_ configuration: Configuration, metrics: Metrics, clock: any WorkClock = SystemClock())
        throws(Configuration.ConfigurationError) -> PlayClient? {
        let google = configuration.google
        guard let packageName = google.packageName, let account = try serviceAccount(configuration) else { return nil }
        return PlayClient(configuration: .init(packageName: packageName, apiURL: google.apiURL,
                                               timeoutSeconds: Double(google.apiTimeoutSeconds)),
                          account: account, clock: clock,
                          observe: { endpoint, status, seconds in
                              metrics.observeGoogleRequest(endpoint: endpoint, status: status, seconds: seconds)
                          })
    }

    /// The Pub/Sub client that reads the push subscription, with the same
    /// service account and timeout as the Android Publisher API; nil
    /// without a service account.
    package static func pubSubClient(_ configuration: Configuration) throws(Configuration.ConfigurationError)
        -> PubSubClient? {
        guard let account = try serviceAccount(configuration) else { return nil }
        return PubSubClient(apiURL: configuration.google.pubSubURL,
                            timeoutSeconds: Double(configuration.google.apiTimeoutSeconds), account: account)
    }

    /// The service account of `WALLET_GOOGLE_SERVICE_ACCOUNT_FILE`, read
    /// once per call; nil when it is not set. A message about it names the
    /// variable and the path, never the content.
    package static func serviceAccount(_ configuration: Configuration) throws(Configuration.ConfigurationError)
        -> ServiceAccount? {
        guard let path = configuration.google.serviceAccountFile else { return nil }
        let bytes: Data
        do {
            bytes = try Data(contentsOf: URL(fileURLWithPath: path))
        } catch {
            throw Configuration.ConfigurationError(variable: "WALLET_GOOGLE_SERVICE_ACCOUNT_FILE", message: "\(path) cannot be read")
        }
        guard bytes.count <= ServiceAccount.fileBytesMax else {
            throw Configuration.ConfigurationError(variable: "WALLET_GOOGLE_SERVICE_ACCOUNT_FILE",
                                                   message: "\(path) is larger than a service account key")
        }
        do {
            return try ServiceAccount(json: Array(bytes))
        } catch {
            throw Configuration.ConfigurationError(variable: "WALLET_GOOGLE_SERVICE_ACCOUNT_FILE",
                                                   message: "\(path): \(error.description)")
        }
    }

    /// The push authenticator, when the audience and service account are
    /// set (the configuration sets both or neither).
    package static func pushAuthenticator(_ configuration: Configuration, metrics: Metrics,
                                          clock: any WorkClock = SystemClock()) -> PushAuthenticator? {
        let google = configuration.google
        guard let audience = google.pushAudience, let email = google.pushServiceAccount else { return nil }
        return PushAuthenticator(configuration: .init(jwksURL: google.pushJWKSURL, audience: audience, serviceAccountEmail: email),
                                 clock: clock) { status, seconds in
            metrics.observeGoogleKeysFetch(status: status.rawValue, seconds: seconds)
        }
    }
}
