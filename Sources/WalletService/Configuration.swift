public import AppStore
public import Foundation
public import HTTPServer
import GooglePlay
public import Logging
public import WalletCore
public import WalletStore

/// The service's settings, read once from the environment (and a few flags)
/// into typed values and validated once. A malformed value stops start-up
/// with a message that names the variable.
///
/// `load` reads the environment and runs `validate`, which checks every
/// value against its range and the rules between values; tools (migrate,
/// keys, check) need no more. `buildApplication` adds `validateForServing`,
/// what only `serve` needs, once.
///
/// Limits carry their unit or `Max` last. Those an operator may tune have a
/// `WALLET_…` variable (the table of docs/configuration.md, which a test
/// keeps equal to `integerSettings` and the others); the rest are fields
/// with their defaults, so tests can set them, and are checked all the same.
public struct Configuration: Sendable {
    /// How a credit request's purchase is vouched for.
    public typealias CreditVerification = CreditSource

    public struct Listen: Sendable, Equatable {
        public var host: String
        public var port: UInt16
    }

    // MARK: The database

    /// nil means the embedded development database under `dataDirectory`.
    /// libpq's URI or conninfo: text, as libpq reads it.
    public var databaseURL: String?
    /// Where migrations and the advisory-locked background sweeps connect:
    /// a session that stays on one server connection, which a pooler in
    /// transaction mode does not give. nil means `databaseURL`.
    public var databaseSessionURL: String?
    /// Named prepared statements per connection; off behind a pooler in
    /// transaction mode.
    public var databasePreparedStatements = true
    public var dataDirectory = "./.wallet"
    public var migrateOnStart = true
    /// Connections for reads (and everything but group commit).
    public var databasePoolSize = 6
    /// Group commit: database writers, and the most operations in one batch.
    public var writers = 2
    public var batchOperationsMax = 256
    /// How long a batch waits for a row lock another transaction holds
    /// before the locked operation is set apart and answered `wallet_busy`.
    /// A batch holds its locks for milliseconds (p99 about 12 ms under
    /// load), so 500 ms is far beyond any wait between writers and admin
    /// scripts, while a wallet held open in psql costs its writer's other
    /// users about a second (the batch, then the operation alone).
    public var lockTimeoutMilliseconds = 500
    /// The longest wait for a pooled connection when the caller gives no
    /// deadline of its own (the request timeout, when shorter, bounds it).
    public var databaseAcquireTimeoutMillisecondsMax = 5_000
    /// The bound on each read the service makes once the schema is up and
    /// before it counts as ready (the console's cookie key).
    public var startupReadTimeoutSeconds = 5
    /// The bound on one statement of `wallet appstore|googleplay reconcile`,
    /// which apply a sweep's notifications one by one.
    public var reconcileCommandStatementTimeoutMilliseconds = 30_000

    /// How long debit keys are kept; a day at least, so a client's retry
    /// loop, a queue replay or an operator's re-run still finds its key.
    public var idempotencyRetentionHours = 168
    public static let idempotencyRetentionHoursMin = 24
    /// Expired keys are deleted in rounds of at most this many rows, at most
    /// this many rounds every interval, so the purge never holds a large
    /// delete open.
    /// How long events are kept for the feed and webhooks (the ledger keeps
    /// every entry for good); a cursor older than this is 410.
    public var eventRetentionDays = 30
    /// Seconds between the verifier's incremental ledger checks in `serve`
    /// (WALLET_VERIFY_INTERVAL_SECONDS); 0 turns the verifier off.
    public var verifyIntervalSeconds = 60
    /// How long a purchase that names no known player is kept for its
    /// player to claim.
    public var unclaimedRetentionDays = 90
    /// Webhook delivery: threads sending at once, each attempt's time limit,
    /// how long an event is retried, the first pause between attempts
    /// (doubling to an hour), and whether http:// endpoints are allowed.
    public var webhookThreads = 4
    public var webhookTimeoutSeconds = 10
    public var webhookRetryHours = 72
    public var webhookFirstRetrySeconds = 10
    public var webhooksAllowHTTP = false
    /// Credit a consumable from the store's own ONE_TIME_CHARGE
    /// notification; false records it only.
    public var creditFromNotifications = true
    /// Spend paid coins before free ones (WALLET_SPEND_PAID_FIRST).
    public var spendPaidFirst = false
    /// What a refund does past the wallet's coins (WALLET_REFUND_DEBT).
    public var refundDebt = RefundDebt.allow
    /// The most one POST /v1/grants gives (WALLET_GRANT_MAX_AMOUNT).
    public var grantAmountMax = 1_000_000
    public var idempotencyPurgeIntervalSeconds = 60
    public var idempotencyPurgeRoundRowsMax = 1_000
    public var idempotencyPurgeRoundsMax = 20
    /// The hold sweeper marks expired holds this often, this many wallets a
    /// round. Nothing depends on it for correctness: every write expires its
    /// wallet's due holds first.
    public var holdSweepIntervalSeconds = 5
    public var holdSweepWalletsMax = 1_000

    // MARK: HTTP

    public var listen = Listen(host: "127.0.0.1", port: 8080)
    /// Where `/metrics`, `/healthz` and `/readyz` are served instead of the
    /// API port (WALLET_OPS_LISTEN); nil: on the API port.
    public var opsListen: Listen?
    /// A file holding the bearer token `/metrics` asks for
    /// (WALLET_METRICS_TOKEN_FILE); nil: none is asked for.
    public var metricsTokenFile: String?
    /// The proxies whose X-Forwarded-For and X-Forwarded-Proto are believed
    /// (WALLET_TRUSTED_PROXIES); none by default.
    public var trustedProxies = TrustedProxies.none
    /// `Secure` on the console's cookie (WALLET_ADMIN_COOKIE_SECURE); nil:
    /// yes, unless the service listens on loopback.
    public var adminCookieSecure: Bool?
    /// Whether the console's cookie is `Secure`, as configured or by default.
    public var consoleCookieSecure: Bool { adminCookieSecure ?? !listen.host.hasPrefix("127.") }
    /// The HTTP server's threads: each is an event loop over its share of
    /// the connections, so a few per core is the useful range.
    public var httpThreads = 4
    public var bodyBytesMax = 1 << 20
    public var headerBytesMax = 16 << 10
    public var connectionsMax = 1024
    /// The most connections one client address may hold: one address can
    /// then not take every slot. At most `connectionsMax`; read as
    /// `connectionsPerIPMaxDefault`, or `connectionsMax` when that is less,
    /// unless set.
    public var connectionsPerIPMax = Self.connectionsPerIPMaxDefault
    public static let connectionsPerIPMaxDefault = 64
    public var idleTimeoutSeconds = 30
    public var requestTimeoutSeconds = 10
    /// At shutdown: how long the server waits for requests in flight, and
    /// then each pool of threads and the writers for their queued work.
    public var shutdownGraceSeconds = 10

    // MARK: Work kept off the HTTP threads, each pool with a bounded queue

    /// Credits whose purchase is looked up with a store over the network
    /// (a receipt with verifyReceipt, a bare flowNO with the App Store
    /// Server API, a purchase token with Google): each holds a thread for
    /// the store's round trip.
    public var storeLookupThreads = 4
    public var storeLookupQueueDepthMax = 256
    /// App Store notifications need no key, so their work (signature checks,
    /// then the database) is anyone's to ask for: two threads, and a short
    /// queue past which Apple is told to retry.
    public var notificationThreads = 2
    public var notificationQueueDepthMax = 32
    /// Google Play pushes, apart from App Store notifications: a push may
    /// wait seconds for Google's keys.
    public var googlePushThreads = 2
    public var googlePushQueueDepthMax = 32
    /// The support console's page reads.
    public var consoleThreads = 2
    public var consoleQueueDepthMax = 64

    // MARK: The rest

    public var logLevel: Logger.Level = .info
    public var creditVerification: Set<CreditVerification> = [.caller]

    /// The support console at /admin, and how long its sessions last.
    public var adminConsole = true
    public var adminSessionMinutes = 60

    public var apple = Apple()
    public var google = Google()

    /// Google Play: the service account that calls the Android Publisher
    /// API, the app's package, and what purchases are accepted.
    public struct Google: Sendable {
        /// The service account's JSON key; read at start-up, never logged.
        public var serviceAccountFile: String?
        public var packageName: String?
        public var apiURL = PlayClient.Configuration.googleAPIURL
        public var apiTimeoutSeconds = 10
        /// Licence testers' purchases (`purchaseType` 0), credited with environment `Test`.
        public var allowTestPurchases = false
        /// Refuse a purchase without `obfuscatedExternalAccountId`.
        public var requireAccountID = false
        /// Where Google publishes the keys of Pub/Sub push tokens.
        public var pushJWKSURL = PushAuthenticator.googleCertsURL
        /// The push subscription's audience, and the service account it
        /// signs as: both must be set for `/v1/googleplay/notifications`.
        public var pushAudience: String?
        public var pushServiceAccount: String?
        /// The push subscription (`projects/P/subscriptions/S`), which
        /// `wallet doctor` reads to compare with the two above; `serve`
        /// does not use it.
        public var pushSubscription: String?
        /// Where Pub/Sub's API is, for reading the push subscription.
        public var pubSubURL = PubSubClient.googleAPIURL
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
        public var verifyReceiptURL = ReceiptVerifier.appleProductionURL
        public var verifyReceiptSandboxURL = ReceiptVerifier.appleSandboxURL
        public var sharedSecret: String?
        /// One whole verifyReceipt call, the sandbox retry included.
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
        public var productionURL = ServerAPIClient.Configuration.appleProductionURL
        public var sandboxURL = ServerAPIClient.Configuration.appleSandboxURL
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
    public typealias RefundPreference = ConsumptionAnswer.Preference

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
        /// The environment variable (or, for a setting only code sets, the
        /// field) the message is about.
        public let variable: String
        public let message: String

        public var description: String { "\(variable): \(message)" }

        package init(variable: String, message: String) {
            self.variable = variable
            self.message = message
        }
    }

    /// The bundle id the App Store Server API's tokens name.
    public var serverAPIBundleID: String? { apple.api.bundleID ?? apple.bundleIDs.first }

    /// Whether `serve` talks to the App Store Server API: for credits,
    /// reconciliation and consumption answers.
    public var usesServerAPI: Bool { creditVerification.contains(.appStoreAPI) || apple.api.isConfigured }

    /// What `serve` needs beyond `validate`: the tools (migrate, keys,
    /// check) run without store settings. `buildApplication` runs it, once.
    public func validateForServing() throws(ConfigurationError) {
        if let first = servingProblems().first { throw first }
    }

    /// Everything `validateForServing` refuses, in the order it meets them,
    /// each variable once: `wallet doctor` names them all.
    public func servingProblems() -> [ConfigurationError] {
        var problems: [ConfigurationError] = []
        do {
            _ = try metricsToken()
        } catch {
            problems.append(error)
        }
        if creditVerification.contains(.googlePlay) {
            for (variable, value) in [("WALLET_GOOGLE_SERVICE_ACCOUNT_FILE", google.serviceAccountFile),
                                      ("WALLET_GOOGLE_PACKAGE_NAME", google.packageName)] where value == nil {
                problems.append(ConfigurationError(variable: variable,
                                                   message: "must be set: WALLET_CREDIT_VERIFICATION includes googleplay"))
            }
        }
        if usesServerAPI || apple.api.consumptionConsent {
            problems += serverAPIProblems()
        }
        if usesAppStoreMode, apple.bundleIDs.isEmpty {
            problems.append(ConfigurationError(
                variable: "WALLET_APPLE_BUNDLE_ID", message: "must be set when WALLET_CREDIT_VERIFICATION includes an App Store mode"))
        }
        // Apple signs every Production notification with the app's Apple ID,
        // and the verifier refuses one it cannot match. Without the id every
        // Production REFUND would be refused, and refunded coins kept.
        if usesAppStoreMode, apple.environments.contains("Production"), apple.appAppleID == nil {
            problems.append(ConfigurationError(
                variable: "WALLET_APPLE_APP_APPLE_ID",
                message: "must be set when an App Store mode accepts Production: without it every Production refund notification is refused"))
        }
        var named: Set<String> = []
        return problems.filter { named.insert($0.variable).inserted }
    }

    /// Whether a credit may be verified with the App Store (JWS, receipt or
    /// the Server API).
    public var usesAppStoreMode: Bool {
        !creditVerification.isDisjoint(with: [.appStoreJWS, .appStoreReceipt, .appStoreAPI])
    }

    /// The token `/metrics` asks for, read from WALLET_METRICS_TOKEN_FILE
    /// (surrounding white space dropped); nil when none is set. A file that
    /// cannot be read, or holds fewer than 16 characters, stops start-up.
    public func metricsToken() throws(ConfigurationError) -> String? {
        guard let path = metricsTokenFile else { return nil }
        guard let data = FileManager.default.contents(atPath: path),
              let text = String(data: data, encoding: .utf8)?.trimmingCharacters(in: .whitespacesAndNewlines),
              text.count >= 16, !text.contains(where: \.isWhitespace) else {
            throw ConfigurationError(variable: "WALLET_METRICS_TOKEN_FILE",
                                     message: "must name a readable file holding one token of at least 16 characters")
        }
        return text
    }

    /// The three credentials, each named when missing, and a bundle id for
    /// the tokens.
    public func validateServerAPI() throws(ConfigurationError) {
        if let first = serverAPIProblems().first { throw first }
    }

    /// Every credential `validateServerAPI` finds missing, in its order.
    func serverAPIProblems() -> [ConfigurationError] {
        let why = creditVerification.contains(.appStoreAPI)
            ? "WALLET_CREDIT_VERIFICATION includes appstore-api"
            : apple.api.consumptionConsent && !apple.api.isConfigured
                ? "WALLET_APPLE_CONSUMPTION_CONSENT is true" : "another App Store Server API setting is set"
        var problems: [ConfigurationError] = []
        for (variable, value) in [("WALLET_APPLE_API_KEY_ID", apple.api.keyID),
                                  ("WALLET_APPLE_API_ISSUER_ID", apple.api.issuerID),
                                  ("WALLET_APPLE_API_PRIVATE_KEY_FILE", apple.api.privateKeyFile)] where value == nil {
            problems.append(ConfigurationError(variable: variable, message: "must be set: \(why)"))
        }
        if serverAPIBundleID == nil {
            problems.append(ConfigurationError(
                variable: "WALLET_APPLE_BUNDLE_ID",
                message: "must be set (or WALLET_APPLE_API_BUNDLE_ID): the App Store Server API's tokens name the app"))
        }
        return problems
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

extension Configuration {
    /// The App Store credit policy: the account token namespace and whether
    /// a token is required, for the app's calls and the store's charges.
    public var creditPolicy: CreditPolicy {
        CreditPolicy(accountTokenNamespace: apple.accountTokenNamespace, requireAccountToken: apple.requireAccountToken)
    }

    /// The policy ONE_TIME_CHARGE notifications are credited under, or nil
    /// with WALLET_CREDIT_FROM_NOTIFICATIONS=false (recorded only).
    public var chargePolicy: CreditPolicy? {
        creditFromNotifications ? creditPolicy : nil
    }
}
