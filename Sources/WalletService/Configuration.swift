public import Logging
import Foundation
public import WalletCore
public import WalletStore

/// The service's settings, read once from the environment (and a few flags)
/// and validated. A malformed value stops start-up with a message that names
/// the variable.
public struct Configuration: Sendable {
    /// How a credit request's purchase is vouched for.
    public typealias CreditVerification = CreditSource

    public struct Listen: Sendable, Equatable {
        public var host: String
        public var port: UInt16
    }

    /// nil means the embedded development database under `dataDirectory`.
    public var databaseURL: String?
    /// Where migrations and the advisory-locked background sweeps connect:
    /// a session that stays on one server connection, which a pooler in
    /// transaction mode does not give. nil means `databaseURL`.
    public var databaseSessionURL: String?
    /// Named prepared statements per connection; off behind a pooler in
    /// transaction mode.
    public var databasePreparedStatements = true
    public var listen = Listen(host: "127.0.0.1", port: 8080)
    public var dataDirectory = "./.wallet"
    public var databasePoolSize = 6
    public var httpThreads = 4
    public var logLevel: Logger.Level = .info
    public var migrateOnStart = true

    public var idempotencyRetentionHours = 168
    public static let idempotencyRetentionHoursMin = 24
    public var creditVerification: Set<CreditVerification> = [.caller]

    public var maxBodyBytes = 1 << 20
    public var maxHeaderBytes = 16 << 10
    public var maxConnections = 1024
    /// The most connections one client address may hold: one address can
    /// then not take every slot. At most `maxConnections`; read as 64, or
    /// `maxConnections` when that is less, unless set.
    public var maxConnectionsPerIP = 64
    public var idleTimeoutSeconds = 30
    public var requestTimeoutSeconds = 10
    /// How long a batch waits for a row lock another transaction holds
    /// before the locked operation is set apart and answered `wallet_busy`.
    /// A batch holds its locks for milliseconds (p99 about 12 ms under
    /// load), so 500 ms is far beyond any wait between writers and admin
    /// scripts, while a wallet held open in psql costs its writer's other
    /// users about a second (the batch, then the operation alone).
    public var lockTimeoutMilliseconds = 500

    /// The support console at /admin, and how long its sessions last.
    public var adminConsole = true
    public var adminSessionMinutes = 60

    /// Group commit: database writers, and the most operations in one batch.
    public var writers = 2
    public var batchOperationsMax = 256

    public var apple = Apple()
    public var google = Google()

    /// Google Play: the service account that calls the Android Publisher
    /// API, the app's package, and what purchases are accepted.
    public struct Google: Sendable {
        /// The service account's JSON key; read at start-up, never logged.
        public var serviceAccountFile: String?
        public var packageName: String?
        public var apiURL = "https://androidpublisher.googleapis.com"
        public var apiTimeoutSeconds = 10
        /// Licence testers' purchases (`purchaseType` 0), credited with environment `Test`.
        public var allowTestPurchases = false
        /// Refuse a purchase without `obfuscatedExternalAccountId`.
        public var requireAccountID = false
        /// Where Google publishes the keys of Pub/Sub push tokens.
        public var pushJWKSURL = "https://www.googleapis.com/oauth2/v3/certs"
        /// The push subscription's audience, and the service account it
        /// signs as: both must be set for `/v1/googleplay/notifications`.
        public var pushAudience: String?
        public var pushServiceAccount: String?
        /// Minutes between voided-purchases sweeps in `serve`; 0 is off.
        public var voidedPollMinutes = 60
    }

    public struct Apple: Sendable {
        public var bundleIDs: [String] = []
        /// PEM or DER files; empty means the shipped Apple Root CA - G3.
        public var rootCertificatePaths: [String] = []
        public var environments: [String] = ["Production"]
        public var appAppleID: Int64?
        public var accountTokenNamespace: String?
        public var requireAccountToken = false
        public var verifyReceiptURL = "https://buy.itunes.apple.com/verifyReceipt"
        public var verifyReceiptSandboxURL = "https://sandbox.itunes.apple.com/verifyReceipt"
        public var sharedSecret: String?
        public var verifyReceiptTimeoutSeconds = 10
        public var api = ServerAPI()
    }

    /// The App Store Server API: its In-App Purchase key, where it is, and
    /// what the service does with it.
    public struct ServerAPI: Sendable {
        public var keyID: String?
        public var issuerID: String?
        /// The `.p8` file; its content is read at start-up and never logged.
        public var privateKeyFile: String?
        /// nil means the first of `WALLET_APPLE_BUNDLE_ID`.
        public var bundleID: String?
        public var productionURL = "https://api.storekit.itunes.apple.com"
        public var sandboxURL = "https://api.storekit-sandbox.apple.com"
        public var timeoutSeconds = 10
        /// Minutes between notification-history sweeps in `serve`; 0 is off.
        public var reconcileIntervalMinutes = 60
        /// The operator declares that its terms obtain the customer's
        /// consent to send consumption information.
        public var consumptionConsent = false
        public var refundPreference = RefundPreference.auto

        /// Whether any of the three credentials is set.
        public var isConfigured: Bool { keyID != nil || issuerID != nil || privateKeyFile != nil }
    }

    /// `WALLET_APPLE_REFUND_PREFERENCE`: what the service asks Apple to do
    /// with a refund request it answers.
    public enum RefundPreference: String, Sendable, CaseIterable {
        case decline
        case grantFull = "grant_full"
        case grantProrated = "grant_prorated"
        /// Grant in full when nothing was consumed or delivered, decline when
        /// everything was consumed, prorate between.
        case auto
    }

    public init() {}

    public var usesEmbeddedDatabase: Bool { databaseURL == nil }

    /// The database URL for migrations, advisory locks and the operator's
    /// commands.
    public var sessionDatabaseURL: String? { databaseSessionURL ?? databaseURL }

    /// The database `serve` works on (`session: false`) or the operator's
    /// commands and sweeps use (`session: true`): the URL's, or the
    /// embedded one, started here if nothing runs it.
    public func openDatabase(session: Bool, logger: Logger) throws -> DatabaseEndpoint {
        try DatabaseEndpoint.open(url: session ? sessionDatabaseURL : databaseURL, dataDirectory: dataDirectory,
                                  logger: logger)
    }

    public struct ConfigurationError: Error, CustomStringConvertible, Equatable {
        public let variable: String
        public let message: String

        public var description: String { "\(variable): \(message)" }
    }

    /// Reads the configuration. `flags` holds command-line values that win
    /// over the environment (`--database-url`, `--listen`, `--data-dir`,
    /// `--no-migrate`).
    public static func load(environment: [String: String], flags: [String: String] = [:]) throws(ConfigurationError) -> Configuration {
        var reader = Reader(environment: environment, flags: flags)
        var configuration = Configuration()
        configuration.databaseURL = reader.string("WALLET_DATABASE_URL", flag: "database-url")
        configuration.databaseSessionURL = reader.string("WALLET_DATABASE_SESSION_URL")
        if configuration.databaseSessionURL != nil, configuration.databaseURL == nil {
            throw ConfigurationError(variable: "WALLET_DATABASE_SESSION_URL",
                                     message: "needs WALLET_DATABASE_URL (the embedded database has no pooler to go past)")
        }
        configuration.databasePreparedStatements = try reader.exactBoolean("WALLET_DATABASE_PREPARED_STATEMENTS")
            ?? configuration.databasePreparedStatements
        if let listen = reader.string("WALLET_LISTEN", flag: "listen") {
            configuration.listen = try parseListen(listen, variable: reader.lastName)
        }
        configuration.dataDirectory = reader.string("WALLET_DATA_DIR", flag: "data-dir") ?? configuration.dataDirectory
        configuration.databasePoolSize = try reader.integer("WALLET_DB_POOL_SIZE", in: 1...512) ?? configuration.databasePoolSize
        // The HTTP server's thread pool: each thread is an event loop over
        // its share of the connections, so a few per core is the useful
        // range, and 256 the most the server takes.
        configuration.httpThreads = try reader.integer("WALLET_HTTP_THREADS", in: 1...256) ?? configuration.httpThreads
        if let level = reader.string("WALLET_LOG_LEVEL") {
            guard let parsed = Logger.Level(name: level) else {
                throw ConfigurationError(variable: "WALLET_LOG_LEVEL", message: "must be one of debug, info, warning, error")
            }
            configuration.logLevel = parsed
        }
        configuration.migrateOnStart = flags["no-migrate"] == nil
        // A day at least: a client's retry loop, a queue replay or an
        // operator's re-run must still find the key, or the debit runs twice.
        configuration.idempotencyRetentionHours = try reader.integer(
            "WALLET_IDEMPOTENCY_RETENTION_HOURS", in: idempotencyRetentionHoursMin...87_600)
            ?? configuration.idempotencyRetentionHours

        configuration.maxBodyBytes = try reader.integer("WALLET_MAX_BODY_BYTES", in: 1_024...(64 << 20)) ?? configuration.maxBodyBytes
        configuration.maxHeaderBytes = try reader.integer("WALLET_MAX_HEADER_BYTES", in: 1_024...(1 << 20)) ?? configuration.maxHeaderBytes
        configuration.maxConnections = try reader.integer("WALLET_MAX_CONNECTIONS", in: 1...65_536) ?? configuration.maxConnections
        // Every server thread must be able to hold a connection.
        guard configuration.maxConnections >= configuration.httpThreads else {
            throw ConfigurationError(variable: "WALLET_MAX_CONNECTIONS",
                                     message: "must be at least WALLET_HTTP_THREADS (\(configuration.httpThreads))")
        }
        configuration.maxConnectionsPerIP = try reader.integer(
            "WALLET_MAX_CONNECTIONS_PER_IP", in: 1...configuration.maxConnections)
            ?? min(configuration.maxConnectionsPerIP, configuration.maxConnections)
        configuration.idleTimeoutSeconds = try reader.integer("WALLET_IDLE_TIMEOUT_SECONDS", in: 1...3_600) ?? configuration.idleTimeoutSeconds
        configuration.requestTimeoutSeconds = try reader.integer("WALLET_REQUEST_TIMEOUT_SECONDS", in: 1...600)
            ?? configuration.requestTimeoutSeconds
        configuration.lockTimeoutMilliseconds = try reader.integer("WALLET_LOCK_TIMEOUT_MILLISECONDS", in: 1...60_000)
            ?? configuration.lockTimeoutMilliseconds
        configuration.adminConsole = try reader.exactBoolean("WALLET_ADMIN_CONSOLE") ?? configuration.adminConsole
        configuration.adminSessionMinutes = try reader.integer("WALLET_ADMIN_SESSION_MINUTES", in: 1...10_080)
            ?? configuration.adminSessionMinutes
        configuration.writers = try reader.integer("WALLET_WRITERS", in: 1...64) ?? configuration.writers
        configuration.batchOperationsMax = try reader.integer("WALLET_BATCH_MAX", in: 1...4_096) ?? configuration.batchOperationsMax

        // Apple.
        configuration.apple.bundleIDs = reader.list("WALLET_APPLE_BUNDLE_ID") ?? []
        configuration.apple.rootCertificatePaths = reader.list("WALLET_APPLE_ROOT_CERTS") ?? []
        if let environments = reader.list("WALLET_APPLE_ENVIRONMENTS") {
            for environment in environments where !["Production", "Sandbox"].contains(environment) {
                throw ConfigurationError(
                    variable: "WALLET_APPLE_ENVIRONMENTS",
                    message: "\(environment) is not allowed; use Production and/or Sandbox (Xcode and LocalTesting are never accepted)")
            }
            configuration.apple.environments = environments
        }
        if let appleID = reader.string("WALLET_APPLE_APP_APPLE_ID") {
            guard let value = Int64(appleID), value > 0 else {
                throw ConfigurationError(variable: "WALLET_APPLE_APP_APPLE_ID", message: "must be a positive integer")
            }
            configuration.apple.appAppleID = value
        }
        if let namespace = reader.string("WALLET_APPLE_ACCOUNT_TOKEN_NAMESPACE") {
            guard UUIDText.isValid(namespace) else {
                throw ConfigurationError(variable: "WALLET_APPLE_ACCOUNT_TOKEN_NAMESPACE", message: "must be a UUID")
            }
            configuration.apple.accountTokenNamespace = namespace.lowercased()
        }
        configuration.apple.requireAccountToken = try reader.boolean("WALLET_APPLE_REQUIRE_ACCOUNT_TOKEN") ?? false
        if configuration.apple.requireAccountToken, configuration.apple.accountTokenNamespace == nil {
            throw ConfigurationError(variable: "WALLET_APPLE_REQUIRE_ACCOUNT_TOKEN",
                                     message: "needs WALLET_APPLE_ACCOUNT_TOKEN_NAMESPACE to be set")
        }
        configuration.apple.verifyReceiptURL = try reader.url("WALLET_APPLE_VERIFY_RECEIPT_URL") ?? configuration.apple.verifyReceiptURL
        configuration.apple.verifyReceiptSandboxURL = try reader.url("WALLET_APPLE_VERIFY_RECEIPT_SANDBOX_URL")
            ?? configuration.apple.verifyReceiptSandboxURL
        configuration.apple.sharedSecret = reader.string("WALLET_APPLE_SHARED_SECRET")
        configuration.apple.api = try readServerAPI(&reader)

        // Google Play.
        configuration.google.serviceAccountFile = reader.string("WALLET_GOOGLE_SERVICE_ACCOUNT_FILE")
        configuration.google.packageName = reader.string("WALLET_GOOGLE_PACKAGE_NAME")
        configuration.google.apiURL = try reader.url("WALLET_GOOGLE_API_URL") ?? configuration.google.apiURL
        configuration.google.apiTimeoutSeconds = try reader.integer("WALLET_GOOGLE_API_TIMEOUT_SECONDS", in: 1...120)
            ?? configuration.google.apiTimeoutSeconds
        configuration.google.allowTestPurchases = try reader.exactBoolean("WALLET_GOOGLE_ALLOW_TEST_PURCHASES") ?? false
        configuration.google.requireAccountID = try reader.exactBoolean("WALLET_GOOGLE_REQUIRE_ACCOUNT_ID") ?? false
        configuration.google.pushJWKSURL = try reader.url("WALLET_GOOGLE_PUSH_JWKS_URL") ?? configuration.google.pushJWKSURL
        configuration.google.pushAudience = reader.string("WALLET_GOOGLE_PUSH_AUDIENCE")
        configuration.google.pushServiceAccount = reader.string("WALLET_GOOGLE_PUSH_SERVICE_ACCOUNT")
        if (configuration.google.pushAudience == nil) != (configuration.google.pushServiceAccount == nil) {
            throw ConfigurationError(
                variable: configuration.google.pushAudience == nil ? "WALLET_GOOGLE_PUSH_AUDIENCE" : "WALLET_GOOGLE_PUSH_SERVICE_ACCOUNT",
                message: "must be set with the other: a push is accepted only from that account, for that audience")
        }
        configuration.google.voidedPollMinutes = try reader.integer("WALLET_GOOGLE_VOIDED_POLL_MINUTES", in: 0...10_080)
            ?? configuration.google.voidedPollMinutes

        // Credit verification: App Store JWS alone for a real deployment,
        // the caller's word on the development database.
        if let modes = reader.list("WALLET_CREDIT_VERIFICATION") {
            var parsed: Set<CreditVerification> = []
            for mode in modes {
                guard let value = CreditVerification(rawValue: mode) else {
                    throw ConfigurationError(variable: "WALLET_CREDIT_VERIFICATION",
                                             message: "\(mode) is not one of appstore-jws, appstore-receipt, appstore-api, googleplay, caller")
                }
                parsed.insert(value)
            }
            guard !parsed.isEmpty else {
                throw ConfigurationError(variable: "WALLET_CREDIT_VERIFICATION", message: "must name at least one mode")
            }
            configuration.creditVerification = parsed
        } else {
            configuration.creditVerification = configuration.usesEmbeddedDatabase ? [.caller] : [.appStoreJWS]
        }
        return configuration
    }

    private static func readServerAPI(_ reader: inout Reader) throws(ConfigurationError) -> ServerAPI {
        var api = ServerAPI()
        api.keyID = reader.string("WALLET_APPLE_API_KEY_ID")
        api.issuerID = reader.string("WALLET_APPLE_API_ISSUER_ID")
        api.privateKeyFile = reader.string("WALLET_APPLE_API_PRIVATE_KEY_FILE")
        api.bundleID = reader.string("WALLET_APPLE_API_BUNDLE_ID")
        api.productionURL = try reader.url("WALLET_APPLE_API_PRODUCTION_URL") ?? api.productionURL
        api.sandboxURL = try reader.url("WALLET_APPLE_API_SANDBOX_URL") ?? api.sandboxURL
        api.timeoutSeconds = try reader.integer("WALLET_APPLE_API_TIMEOUT_SECONDS", in: 1...120) ?? api.timeoutSeconds
        api.reconcileIntervalMinutes = try reader.integer("WALLET_APPLE_RECONCILE_INTERVAL_MINUTES", in: 0...10_080)
            ?? api.reconcileIntervalMinutes
        api.consumptionConsent = try reader.boolean("WALLET_APPLE_CONSUMPTION_CONSENT") ?? false
        if let preference = reader.string("WALLET_APPLE_REFUND_PREFERENCE") {
            guard let value = RefundPreference(rawValue: preference.lowercased()) else {
                throw ConfigurationError(variable: "WALLET_APPLE_REFUND_PREFERENCE",
                                         message: "must be one of auto, decline, grant_full, grant_prorated")
            }
            api.refundPreference = value
        }
        return api
    }

    /// The bundle id the App Store Server API's tokens name.
    public var serverAPIBundleID: String? { apple.api.bundleID ?? apple.bundleIDs.first }

    /// Whether `serve` talks to the App Store Server API: for credits,
    /// reconciliation and consumption answers.
    public var usesServerAPI: Bool { creditVerification.contains(.appStoreAPI) || apple.api.isConfigured }

    /// What `serve` needs beyond `load`: the tools (migrate, keys, check)
    /// run without App Store settings.
    public func validateForServing() throws(ConfigurationError) {
        if creditVerification.contains(.googlePlay) {
            for (variable, value) in [("WALLET_GOOGLE_SERVICE_ACCOUNT_FILE", google.serviceAccountFile),
                                      ("WALLET_GOOGLE_PACKAGE_NAME", google.packageName)] where value == nil {
                throw ConfigurationError(variable: variable, message: "must be set: WALLET_CREDIT_VERIFICATION includes googleplay")
            }
        }
        let appStoreModes: Set<CreditVerification> = [.appStoreJWS, .appStoreReceipt, .appStoreAPI]
        if usesServerAPI || apple.api.consumptionConsent {
            try validateServerAPI()
        }
        if !creditVerification.isDisjoint(with: appStoreModes), apple.bundleIDs.isEmpty {
            throw ConfigurationError(variable: "WALLET_APPLE_BUNDLE_ID",
                                     message: "must be set when WALLET_CREDIT_VERIFICATION includes an App Store mode")
        }
        // Apple signs every Production notification with the app's Apple ID,
        // and the verifier refuses one it cannot match. Without the id every
        // Production REFUND would be refused, and refunded coins kept.
        if !creditVerification.isDisjoint(with: appStoreModes),
           apple.environments.contains("Production"), apple.appAppleID == nil {
            throw ConfigurationError(
                variable: "WALLET_APPLE_APP_APPLE_ID",
                message: "must be set when an App Store mode accepts Production: without it every Production refund notification is refused")
        }
    }

    /// The three credentials, each named when missing, and a bundle id for
    /// the tokens.
    public func validateServerAPI() throws(ConfigurationError) {
        let why = creditVerification.contains(.appStoreAPI)
            ? "WALLET_CREDIT_VERIFICATION includes appstore-api"
            : apple.api.consumptionConsent && !apple.api.isConfigured
                ? "WALLET_APPLE_CONSUMPTION_CONSENT is true" : "another App Store Server API setting is set"
        for (variable, value) in [("WALLET_APPLE_API_KEY_ID", apple.api.keyID),
                                  ("WALLET_APPLE_API_ISSUER_ID", apple.api.issuerID),
                                  ("WALLET_APPLE_API_PRIVATE_KEY_FILE", apple.api.privateKeyFile)] where value == nil {
            throw ConfigurationError(variable: variable, message: "must be set: \(why)")
        }
        if serverAPIBundleID == nil {
            throw ConfigurationError(variable: "WALLET_APPLE_BUNDLE_ID",
                                     message: "must be set (or WALLET_APPLE_API_BUNDLE_ID): the App Store Server API's tokens name the app")
        }
    }

    static func parseListen(_ text: String, variable: String) throws(ConfigurationError) -> Listen {
        guard let colon = text.lastIndex(of: ":"),
              let port = UInt16(text[text.index(after: colon)...]) else {
            throw ConfigurationError(variable: variable, message: "must be host:port, such as 127.0.0.1:8080")
        }
        var host = String(text[..<colon])
        if host.isEmpty { host = "0.0.0.0" }
        guard IPv4Text.isValid(host) || host == "localhost" else {
            throw ConfigurationError(variable: variable, message: "host must be an IPv4 address or localhost")
        }
        return Listen(host: host == "localhost" ? "127.0.0.1" : host, port: port)
    }

    /// Reads variables, remembering the name of the last one for messages.
    private struct Reader {
        let environment: [String: String]
        let flags: [String: String]
        var lastName = ""

        init(environment: [String: String], flags: [String: String]) {
            self.environment = environment
            self.flags = flags
        }

        mutating func string(_ name: String, flag: String? = nil) -> String? {
            if let flag, let value = flags[flag] {
                lastName = "--" + flag
                return value
            }
            lastName = name
            guard let value = environment[name]?.trimmingCharacters(in: .whitespaces), !value.isEmpty else { return nil }
            return value
        }

        mutating func integer(_ name: String, in range: ClosedRange<Int>) throws(ConfigurationError) -> Int? {
            guard let text = string(name) else { return nil }
            guard let value = Int(text), range.contains(value) else {
                throw ConfigurationError(variable: name,
                                         message: "must be an integer from \(range.lowerBound) to \(range.upperBound)")
            }
            return value
        }

        mutating func boolean(_ name: String) throws(ConfigurationError) -> Bool? {
            guard let text = string(name) else { return nil }
            switch text.lowercased() {
            case "true", "1", "yes": return true
            case "false", "0", "no": return false
            default: throw ConfigurationError(variable: name, message: "must be true or false")
            }
        }

        /// `true` or `false`, exactly.
        mutating func exactBoolean(_ name: String) throws(ConfigurationError) -> Bool? {
            guard let text = string(name) else { return nil }
            guard let value = ["true": true, "false": false][text] else {
                throw ConfigurationError(variable: name, message: "must be true or false")
            }
            return value
        }

        mutating func list(_ name: String) -> [String]? {
            guard let text = string(name) else { return nil }
            return text.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
        }

        mutating func url(_ name: String) throws(ConfigurationError) -> String? {
            guard let text = string(name) else { return nil }
            guard text.hasPrefix("https://") || text.hasPrefix("http://") else {
                throw ConfigurationError(variable: name, message: "must be an http or https URL")
            }
            return text
        }
    }
}

enum IPv4Text {
    static func isValid(_ text: String) -> Bool {
        let parts = text.split(separator: ".", omittingEmptySubsequences: false)
        return parts.count == 4 && parts.allSatisfy { part in
            !part.isEmpty && part.count <= 3 && part.allSatisfy(\.isASCII) && UInt8(part) != nil
        }
    }
}

enum UUIDText {
    static func isValid(_ text: String) -> Bool {
        let bytes = Array(text.utf8)
        guard bytes.count == 36 else { return false }
        for (index, byte) in bytes.enumerated() {
            if [8, 13, 18, 23].contains(index) {
                guard byte == UInt8(ascii: "-") else { return false }
            } else {
                guard (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte)
                    || (UInt8(ascii: "a")...UInt8(ascii: "f")).contains(byte | 0x20) else { return false }
            }
        }
        return true
    }
}
