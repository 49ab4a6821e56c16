package import AppStore
import Crypto
import Foundation
package import Locking
package import Logging
package import ServiceSupport
import WalletCore

/// Builds the App Store verifiers from the configuration.
package enum AppStoreSetup {
    /// The offline JWS verifier: the configured roots (the shipped Apple Root
    /// CA - G3 by default), bundle ids, environments and app Apple ID.
    package static func verifier(_ apple: Configuration.Apple) throws -> SignedDataVerifier {
        var roots = VerifierConfiguration.defaultRoots
        if !apple.rootCertificatePaths.isEmpty {
            do {
                roots = try VerifierConfiguration.loadRootCertificates(paths: apple.rootCertificatePaths)
            } catch {
                throw Configuration.ConfigurationError(variable: "WALLET_APPLE_ROOT_CERTS", message: error.description)
            }
        }
        return SignedDataVerifier(configuration: VerifierConfiguration(
            rootCertificates: roots, bundleIDs: Set(apple.bundleIDs),
            environments: Set(apple.environments.map { Environment(rawValue: $0) }), appAppleID: apple.appAppleID))
    }

    /// The verifyReceipt client, for StoreKit 1 receipts.
    package static func receiptVerifier(_ apple: Configuration.Apple) -> ReceiptVerifier {
        ReceiptVerifier(configuration: .init(
            productionURL: apple.verifyReceiptURL, sandboxURL: apple.verifyReceiptSandboxURL,
            sharedSecret: apple.sharedSecret, bundleIDs: Set(apple.bundleIDs), allowSandbox: apple.environments.contains("Sandbox"),
            timeoutSeconds: Double(apple.verifyReceiptTimeoutSeconds)))
    }

    /// The App Store Server API client, or nil when its settings are not
    /// all there (`validateServerAPI`, which serving and reconciling run
    /// first, names what is missing). Reads the `.p8` file once; a message
    /// about it names the variable and the path, never the content.
    package static func serverAPIClient(_ configuration: Configuration, metrics: Metrics, logger: Logger,
                                        clock: any WorkClock = SystemClock()) throws -> ServerAPIClient? {
        let api = configuration.apple.api
        guard let keyID = api.keyID, let issuerID = api.issuerID, let path = api.privateKeyFile,
              let bundleID = configuration.serverAPIBundleID else { return nil }
        let key: PrivateKey
        do {
            let pem = try String(contentsOfFile: path, encoding: .utf8)
            key = try PrivateKey(pem: pem)
        } catch let error as PrivateKey.KeyError {
            throw Configuration.ConfigurationError(variable: "WALLET_APPLE_API_PRIVATE_KEY_FILE",
                                                   message: "\(path) is \(error.description)")
        } catch {
            throw Configuration.ConfigurationError(variable: "WALLET_APPLE_API_PRIVATE_KEY_FILE",
                                                   message: "\(path) cannot be read")
        }
        let unauthorizedLog = RateLimitedLog(intervalSeconds: 60, clock: clock)
        return ServerAPIClient(
            configuration: .init(token: .init(keyID: keyID, issuerID: issuerID, bundleID: bundleID),
                                 productionURL: api.productionURL, sandboxURL: api.sandboxURL,
                                 timeoutSeconds: Double(api.timeoutSeconds)),
            key: key, clock: clock,
            observe: { endpoint, status, seconds in
                metrics.observeAppleRequest(endpoint: endpoint, status: status, seconds: seconds)
            },
            unauthorized: {
                unauthorizedLog.run {
                    logger.error("the App Store Server API refused the key (HTTP 401): check WALLET_APPLE_API_KEY_ID, WALLET_APPLE_API_ISSUER_ID, WALLET_APPLE_API_PRIVATE_KEY_FILE and the bundle id",
                                 ["config.key_id": keyID, "config.bundle_id": bundleID])
                }
            })
    }
}
