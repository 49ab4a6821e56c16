public import Crypto
public import Foundation

/// What a `SignedDataVerifier` accepts.
public struct VerifierConfiguration: Sendable {
    /// Trust anchors. A chain must end at one of these; the certificates a
    /// token carries are never trusted on their own.
    public var rootCertificates: [Certificate]
    /// Accepted bundle identifiers. Empty accepts nothing.
    public var bundleIDs: Set<String>
    /// Accepted environments. `Xcode` and `LocalTesting` are refused even if
    /// listed, because such tokens are not signed by the App Store.
    public var environments: Set<Environment>
    /// The app's Apple ID. Production notifications must carry exactly this
    /// value; without it, no Production notification is accepted.
    public var appAppleID: Int64?
    /// The current time, used only to refuse a `signedDate` in the future.
    public var clock: @Sendable () -> Date

    public init(
        rootCertificates: [Certificate] = VerifierConfiguration.defaultRoots,
        bundleIDs: Set<String>,
        environments: Set<Environment> = [.production],
        appAppleID: Int64? = nil,
        clock: @escaping @Sendable () -> Date = { Date() }
    ) {
        self.rootCertificates = rootCertificates
        self.bundleIDs = bundleIDs
        self.environments = environments
        self.appAppleID = appAppleID
        self.clock = clock
    }

    /// Apple Root CA - G3, compiled into the binary.
    public static var defaultRoots: [Certificate] {
        embeddedAppleRoots
    }

    private static let embeddedAppleRoots: [Certificate] = {
        let name = "AppleRootCA-G3.pem"
        guard let data = EmbeddedFiles.named(name) else {
            preconditionFailure("\(name) is not embedded in the AppStore target")
        }
        let roots = Certificate.pemBundle(String(decoding: data, as: UTF8.self))
        precondition(roots.count == 1 && roots[0].isCA, "\(name) must hold exactly one CA certificate")
        return roots
    }()

    /// Loads root certificates from a comma-separated list of files, such as
    /// the value of an environment variable.
    public static func loadRootCertificates(
        commaSeparatedPaths: String
    ) throws(RootCertificateLoadError) -> [Certificate] {
        let paths = commaSeparatedPaths.split(separator: ",", omittingEmptySubsequences: false)
            .map { $0.trimmingCharacters(in: .whitespaces) }
        return try loadRootCertificates(paths: paths)
    }

    /// Loads root certificates from files. Each file is PEM (one or more
    /// certificates) or a single DER certificate. Every certificate must be
    /// a CA; an empty list or an empty path is an error.
    public static func loadRootCertificates(paths: [String]) throws(RootCertificateLoadError) -> [Certificate] {
        guard !paths.isEmpty else { throw RootCertificateLoadError(path: "", message: "no root certificate files given") }
        var roots: [Certificate] = []
        for path in paths {
            guard !path.isEmpty else { throw RootCertificateLoadError(path: path, message: "empty path in the list") }
            let data: Data
            do {
                data = try Data(contentsOf: URL(fileURLWithPath: path))
            } catch {
                throw RootCertificateLoadError(path: path, message: "cannot read the file")
            }
            let loaded: [Certificate]
            // DER starts with a SEQUENCE tag; anything else is read as PEM text.
            if data.first != 0x30 {
                loaded = Certificate.pemBundle(String(decoding: data, as: UTF8.self))
                guard !loaded.isEmpty else {
                    throw RootCertificateLoadError(path: path, message: "not a PEM file of certificates")
                }
            } else {
                do {
                    loaded = [try Certificate(der: data)]
                } catch {
                    throw RootCertificateLoadError(path: path, message: "not a DER certificate: \(error.message)")
                }
            }
            for certificate in loaded where !certificate.isCA {
                throw RootCertificateLoadError(
                    path: path, message: "\(certificate.subjectSummary) is not a CA certificate"
                )
            }
            roots += loaded
        }
        return roots
    }
}

/// A root certificate file that could not be used.
public struct RootCertificateLoadError: Error, Sendable, CustomStringConvertible {
    public let path: String
    public let message: String

    public var description: String {
        path.isEmpty ? message : "\(path): \(message)"
    }
}
