import AppStore
import Crypto

/// Builds the App Store verifiers from the configuration.
enum AppStoreSetup {
    /// The offline JWS verifier: the configured roots (the shipped Apple Root
    /// CA - G3 by default), bundle ids, environments and app Apple ID.
    static func verifier(_ apple: Configuration.Apple) throws -> SignedDataVerifier {
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
}
