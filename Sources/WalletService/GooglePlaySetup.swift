import Foundation
package import GooglePlay
package import Locking
package import ServiceSupport
import StoreHTTP

/// Builds the Google Play client from the configuration.
package enum GooglePlaySetup {
    /// The Android Publisher API client, or nil when Google Play is not set
    /// up. Reads the service account's key file once; a message about it
    /// names the variable and the path, never the content.
    package static func client(_ configuration: Configuration, metrics: Metrics,
                               clock: any WorkClock = SystemClock()) throws -> PlayClient? {
        let google = configuration.google
        guard let path = google.serviceAccountFile, let packageName = google.packageName else { return nil }
        let account: ServiceAccount
        do {
            let bytes = try Data(contentsOf: URL(fileURLWithPath: path))
            guard bytes.count <= ServiceAccount.fileBytesMax else {
                throw Configuration.ConfigurationError(variable: "WALLET_GOOGLE_SERVICE_ACCOUNT_FILE",
                                                       message: "\(path) is larger than a service account key")
            }
            account = try ServiceAccount(json: Array(bytes))
        } catch let error as ServiceAccount.LoadError {
            throw Configuration.ConfigurationError(variable: "WALLET_GOOGLE_SERVICE_ACCOUNT_FILE",
                                                   message: "\(path): \(error.description)")
        } catch let error as Configuration.ConfigurationError {
            throw error
        } catch {
            throw Configuration.ConfigurationError(variable: "WALLET_GOOGLE_SERVICE_ACCOUNT_FILE", message: "\(path) cannot be read")
        }
        return PlayClient(configuration: .init(packageName: packageName, apiURL: google.apiURL,
                                               timeoutSeconds: Double(google.apiTimeoutSeconds)),
                          account: account, clock: clock,
                          observe: { endpoint, status, seconds in
                              metrics.observeGoogleRequest(endpoint: endpoint, status: status, seconds: seconds)
                          })
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
