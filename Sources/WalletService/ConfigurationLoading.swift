import AppStore
import Foundation
import GooglePlay
import HTTPServer
import Logging
import WalletCore

extension Configuration {
    /// Reads the configuration and validates it. `flags` holds command-line
    /// values that win over the environment (`--database-url`, `--listen`,
    /// `--data-dir`, `--no-migrate`).
    public static func load(environment: [String: String], flags: [String: String] = [:]) throws(ConfigurationError) -> Configuration {
        var reader = Reader(environment: environment, flags: flags)
        let configuration = try read(&reader)
        try configuration.validate()
        return configuration
    }

    /// Every environment variable `load` reads, in order, with the flag
    /// that wins over it, if any.
    static var variables: [(name: String, flag: String?)] {
        var reader = Reader(environment: [:], flags: [:])
        _ = try? read(&reader)
        return reader.names.map { ($0, reader.flagNames[$0]) }
    }

    /// Each value's text into its type; ranges and the rules between values
    /// are `validate`'s.
    private static func read(_ reader: inout Reader) throws(ConfigurationError) -> Configuration {
        var configuration = Configuration()
        configuration.databaseURL = reader.string("WALLET_DATABASE_URL", flag: "database-url")
        configuration.databaseSessionURL = reader.string("WALLET_DATABASE_SESSION_URL")
        if let listen = reader.string("WALLET_LISTEN", flag: "listen") {
            configuration.listen = try parseListen(listen, variable: reader.lastName)
        }
        if let ops = reader.string("WALLET_OPS_LISTEN") {
            configuration.opsListen = try parseListen(ops, variable: reader.lastName)
        }
        configuration.metricsTokenFile = reader.string("WALLET_METRICS_TOKEN_FILE")
        if let proxies = reader.string("WALLET_TRUSTED_PROXIES") {
            guard let parsed = TrustedProxies(proxies) else {
                throw ConfigurationError(variable: "WALLET_TRUSTED_PROXIES",
                                         message: "must be IPv4 networks, comma-separated, such as 10.0.0.0/8,192.168.1.7")
            }
            configuration.trustedProxies = parsed
        }
        if let secure = reader.string("WALLET_ADMIN_COOKIE_SECURE") {
            configuration.adminCookieSecure = try parseBoolean(secure, variable: "WALLET_ADMIN_COOKIE_SECURE")
        }
        configuration.dataDirectory = reader.string("WALLET_DATA_DIR", flag: "data-dir") ?? configuration.dataDirectory
        configuration.migrateOnStart = reader.flags["no-migrate"] == nil
        if let level = reader.string("WALLET_LOG_LEVEL") {
            guard let parsed = Logger.Level(name: level) else {
                throw ConfigurationError(variable: "WALLET_LOG_LEVEL", message: "must be one of debug, info, warning, error")
            }
            configuration.logLevel = parsed
        }
        if let mode = reader.string("WALLET_REFUND_DEBT") {
            guard let parsed = RefundDebt(rawValue: mode) else {
                throw ConfigurationError(variable: "WALLET_REFUND_DEBT", message: "must be one of allow, floor")
            }
            configuration.refundDebt = parsed
        }

        for setting in integerSettings {
            guard let variable = setting.variable, let text = reader.string(variable) else { continue }
            guard let value = Int(text) else { throw setting.outOfRange(in: configuration) }
            configuration[keyPath: setting.value] = value
        }
        // One address may by default hold as many connections as all may.
        if reader.environment["WALLET_MAX_CONNECTIONS_PER_IP"].flatMap(Reader.trimmed) == nil {
            configuration.connectionsPerIPMax = min(connectionsPerIPMaxDefault, configuration.connectionsMax)
        }
        for setting in booleanSettings {
            guard let text = reader.string(setting.variable) else { continue }
            configuration[keyPath: setting.value] = try parseBoolean(text, variable: setting.variable)
        }
        for setting in urlSettings {
            guard let text = reader.string(setting.variable) else { continue }
            configuration[keyPath: setting.value] = try parseURL(text, variable: setting.variable)
        }

        try readApple(&reader, into: &configuration.apple)
        try readGoogle(&reader, into: &configuration.google)

        // Credit verification: App Store JWS alone for a real deployment,
        // the caller's word on the development database.
        if let modes = reader.list("WALLET_CREDIT_VERIFICATION") {
            var parsed: Set<CreditVerification> = []
            for mode in modes {
                // A notification credits on its own (WALLET_CREDIT_FROM_NOTIFICATIONS), not as a request's mode.
                guard let value = CreditVerification(rawValue: mode), value != .appStoreNotification else {
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

    private static func readApple(_ reader: inout Reader, into apple: inout Apple) throws(ConfigurationError) {
        apple.bundleIDs = reader.list("WALLET_APPLE_BUNDLE_ID") ?? []
        apple.rootCertificatePaths = reader.list("WALLET_APPLE_ROOT_CERTS") ?? []
        if let environments = reader.list("WALLET_APPLE_ENVIRONMENTS") {
            for environment in environments where !["Production", "Sandbox"].contains(environment) {
                throw ConfigurationError(
                    variable: "WALLET_APPLE_ENVIRONMENTS",
                    message: "\(environment) is not allowed; use Production and/or Sandbox (Xcode and LocalTesting are never accepted)")
            }
            apple.environments = environments
        }
        if let appleID = reader.string("WALLET_APPLE_APP_APPLE_ID") {
            guard let value = Int64(appleID), value > 0 else {
                throw ConfigurationError(variable: "WALLET_APPLE_APP_APPLE_ID", message: "must be a positive integer")
            }
            apple.appAppleID = value
        }
        if let namespace = reader.string("WALLET_APPLE_ACCOUNT_TOKEN_NAMESPACE") {
            guard UUIDText.isValid(namespace) else {
                throw ConfigurationError(variable: "WALLET_APPLE_ACCOUNT_TOKEN_NAMESPACE", message: "must be a UUID")
            }
            apple.accountTokenNamespace = namespace.lowercased()
        }
        apple.sharedSecret = reader.string("WALLET_APPLE_SHARED_SECRET")
        apple.api.keyID = reader.string("WALLET_APPLE_API_KEY_ID")
        apple.api.issuerID = reader.string("WALLET_APPLE_API_ISSUER_ID")
        apple.api.privateKeyFile = reader.string("WALLET_APPLE_API_PRIVATE_KEY_FILE")
        apple.api.bundleID = reader.string("WALLET_APPLE_API_BUNDLE_ID")
        if let preference = reader.string("WALLET_APPLE_REFUND_PREFERENCE") {
            guard let value = RefundPreference(rawValue: preference.lowercased()) else {
                throw ConfigurationError(variable: "WALLET_APPLE_REFUND_PREFERENCE",
                                         message: "must be one of auto, decline, grant_full, grant_prorated")
            }
            apple.api.refundPreference = value
        }
    }

    private static func readGoogle(_ reader: inout Reader, into google: inout Google) throws(ConfigurationError) {
        google.serviceAccountFile = reader.string("WALLET_GOOGLE_SERVICE_ACCOUNT_FILE")
        google.packageName = reader.string("WALLET_GOOGLE_PACKAGE_NAME")
        google.pushAudience = reader.string("WALLET_GOOGLE_PUSH_AUDIENCE")
        google.pushServiceAccount = reader.string("WALLET_GOOGLE_PUSH_SERVICE_ACCOUNT")
        if let subscription = reader.string("WALLET_GOOGLE_PUSH_SUBSCRIPTION") {
            guard PubSubClient.isSubscriptionName(subscription) else {
                throw ConfigurationError(variable: "WALLET_GOOGLE_PUSH_SUBSCRIPTION",
                                         message: "must be a subscription's full name, such as projects/my-project/subscriptions/play-rtdn-push")
            }
            google.pushSubscription = subscription
        }
    }

    /// Checks every value against its range and the rules between values.
    /// `load` runs it; a configuration built in code (a test's) runs it
    /// before `buildApplication`.
    public func validate() throws(ConfigurationError) {
        for setting in Self.integerSettings where !setting.allowed(in: self).contains(self[keyPath: setting.value]) {
            throw setting.outOfRange(in: self)
        }
        if databaseSessionURL != nil, databaseURL == nil {
            throw ConfigurationError(variable: "WALLET_DATABASE_SESSION_URL",
                                     message: "needs WALLET_DATABASE_URL (the embedded database has no pooler to go past)")
        }
        if let ops = opsListen, ops.port != 0, ops.port == listen.port {
            throw ConfigurationError(variable: "WALLET_OPS_LISTEN", message: "must be another port than WALLET_LISTEN's")
        }
        if apple.requireAccountToken, apple.accountTokenNamespace == nil {
            throw ConfigurationError(variable: "WALLET_APPLE_REQUIRE_ACCOUNT_TOKEN",
                                     message: "needs WALLET_APPLE_ACCOUNT_TOKEN_NAMESPACE to be set")
        }
        if (google.pushAudience == nil) != (google.pushServiceAccount == nil) {
            throw ConfigurationError(
                variable: google.pushAudience == nil ? "WALLET_GOOGLE_PUSH_AUDIENCE" : "WALLET_GOOGLE_PUSH_SERVICE_ACCOUNT",
                message: "must be set with the other: a push is accepted only from that account, for that audience")
        }
        if google.pushSubscription != nil, google.pushAudience == nil {
            throw ConfigurationError(variable: "WALLET_GOOGLE_PUSH_SUBSCRIPTION",
                                     message: "needs WALLET_GOOGLE_PUSH_AUDIENCE and WALLET_GOOGLE_PUSH_SERVICE_ACCOUNT, which it is compared with")
        }
    }

    // MARK: The settings

    /// A whole-number setting: the variable it is read from (nil for one
    /// only code sets, named by its field), and its range. A bound may come
    /// from another setting, named in the message when it is a floor.
    struct IntegerSetting {
        let variable: String?
        let field: String
        let value: WritableKeyPath<Configuration, Int>
        let range: ClosedRange<Int>
        var atLeast: (name: String, value: KeyPath<Configuration, Int>)?
        var atMost: (name: String, value: KeyPath<Configuration, Int>)?

        var name: String { variable ?? field }

        func allowed(in configuration: Configuration) -> ClosedRange<Int> {
            let lowest = max(range.lowerBound, atLeast.map { configuration[keyPath: $0.value] } ?? range.lowerBound)
            let highest = min(range.upperBound, atMost.map { configuration[keyPath: $0.value] } ?? range.upperBound)
            return lowest...max(lowest, highest)
        }

        func outOfRange(in configuration: Configuration) -> ConfigurationError {
            let allowed = allowed(in: configuration)
            let floor = atLeast.map { " (at least \($0.name))" } ?? ""
            return ConfigurationError(variable: name,
                                      message: "must be an integer from \(allowed.lowerBound) to \(allowed.upperBound)\(floor)")
        }
    }

    /// In the order they are read and checked: a setting that bounds
    /// another comes first.
    static var integerSettings: [IntegerSetting] {
        func variable(_ name: String, _ value: WritableKeyPath<Configuration, Int>, _ range: ClosedRange<Int>,
                      field: String) -> IntegerSetting {
            IntegerSetting(variable: name, field: field, value: value, range: range)
        }
        func code(_ field: String, _ value: WritableKeyPath<Configuration, Int>, _ range: ClosedRange<Int>) -> IntegerSetting {
            IntegerSetting(variable: nil, field: field, value: value, range: range)
        }
        var connections = variable("WALLET_MAX_CONNECTIONS", \.connectionsMax, 1...65_536, field: "connectionsMax")
        // Every server thread must be able to hold a connection.
        connections.atLeast = ("WALLET_HTTP_THREADS", \.httpThreads)
        var perIP = variable("WALLET_MAX_CONNECTIONS_PER_IP", \.connectionsPerIPMax, 1...65_536, field: "connectionsPerIPMax")
        perIP.atMost = ("WALLET_MAX_CONNECTIONS", \.connectionsMax)
        return [
            variable("WALLET_DB_POOL_SIZE", \.databasePoolSize, 1...512, field: "databasePoolSize"),
            variable("WALLET_HTTP_THREADS", \.httpThreads, 1...256, field: "httpThreads"),
            variable("WALLET_WRITERS", \.writers, 1...64, field: "writers"),
            variable("WALLET_BATCH_MAX", \.batchOperationsMax, 1...4_096, field: "batchOperationsMax"),
            variable("WALLET_IDEMPOTENCY_RETENTION_HOURS", \.idempotencyRetentionHours,
                     idempotencyRetentionHoursMin...87_600, field: "idempotencyRetentionHours"),
            variable("WALLET_EVENTS_RETENTION_DAYS", \.eventRetentionDays, 1...3_650, field: "eventRetentionDays"),
            variable("WALLET_UNCLAIMED_RETENTION_DAYS", \.unclaimedRetentionDays, 1...3_650,
                     field: "unclaimedRetentionDays"),
            variable("WALLET_VERIFY_INTERVAL_SECONDS", \.verifyIntervalSeconds, 0...86_400, field: "verifyIntervalSeconds"),
            variable("WALLET_GRANT_MAX_AMOUNT", \.grantAmountMax, 1...1_000_000_000_000, field: "grantAmountMax"),
            variable("WALLET_WEBHOOKS_THREADS", \.webhookThreads, 1...64, field: "webhookThreads"),
            variable("WALLET_WEBHOOKS_TIMEOUT_SECONDS", \.webhookTimeoutSeconds, 1...60, field: "webhookTimeoutSeconds"),
            variable("WALLET_WEBHOOKS_RETRY_HOURS", \.webhookRetryHours, 1...720, field: "webhookRetryHours"),
            variable("WALLET_WEBHOOKS_FIRST_RETRY_SECONDS", \.webhookFirstRetrySeconds, 1...3_600,
                     field: "webhookFirstRetrySeconds"),
            variable("WALLET_MAX_BODY_BYTES", \.bodyBytesMax, 1_024...(64 << 20), field: "bodyBytesMax"),
            variable("WALLET_MAX_HEADER_BYTES", \.headerBytesMax, 1_024...(1 << 20), field: "headerBytesMax"),
            connections,
            perIP,
            variable("WALLET_IDLE_TIMEOUT_SECONDS", \.idleTimeoutSeconds, 1...3_600, field: "idleTimeoutSeconds"),
            variable("WALLET_REQUEST_TIMEOUT_SECONDS", \.requestTimeoutSeconds, 1...600, field: "requestTimeoutSeconds"),
            variable("WALLET_LOCK_TIMEOUT_MILLISECONDS", \.lockTimeoutMilliseconds, 1...60_000, field: "lockTimeoutMilliseconds"),
            variable("WALLET_ADMIN_SESSION_MINUTES", \.adminSessionMinutes, 1...10_080, field: "adminSessionMinutes"),
            variable("WALLET_STORE_LOOKUP_THREADS", \.storeLookupThreads, 1...256, field: "storeLookupThreads"),
            variable("WALLET_APPLE_API_TIMEOUT_SECONDS", \.apple.api.timeoutSeconds, 1...120, field: "apple.api.timeoutSeconds"),
            variable("WALLET_APPLE_RECONCILE_INTERVAL_MINUTES", \.apple.api.reconcileIntervalMinutes, 0...10_080,
                     field: "apple.api.reconcileIntervalMinutes"),
            variable("WALLET_GOOGLE_API_TIMEOUT_SECONDS", \.google.apiTimeoutSeconds, 1...120, field: "google.apiTimeoutSeconds"),
            variable("WALLET_GOOGLE_VOIDED_POLL_MINUTES", \.google.voidedPollMinutes, 0...10_080, field: "google.voidedPollMinutes"),

            code("storeLookupQueueDepthMax", \.storeLookupQueueDepthMax, 1...65_536),
            code("notificationThreads", \.notificationThreads, 1...64),
            code("notificationQueueDepthMax", \.notificationQueueDepthMax, 1...4_096),
            code("googlePushThreads", \.googlePushThreads, 1...64),
            code("googlePushQueueDepthMax", \.googlePushQueueDepthMax, 1...4_096),
            code("consoleThreads", \.consoleThreads, 1...64),
            code("consoleQueueDepthMax", \.consoleQueueDepthMax, 1...4_096),
            code("shutdownGraceSeconds", \.shutdownGraceSeconds, 1...600),
            code("databaseAcquireTimeoutMillisecondsMax", \.databaseAcquireTimeoutMillisecondsMax, 1...600_000),
            code("startupReadTimeoutSeconds", \.startupReadTimeoutSeconds, 1...600),
            code("reconcileCommandStatementTimeoutMilliseconds", \.reconcileCommandStatementTimeoutMilliseconds, 1...3_600_000),
            code("idempotencyPurgeIntervalSeconds", \.idempotencyPurgeIntervalSeconds, 1...3_600),
            code("idempotencyPurgeRoundRowsMax", \.idempotencyPurgeRoundRowsMax, 1...100_000),
            code("idempotencyPurgeRoundsMax", \.idempotencyPurgeRoundsMax, 1...1_000),
            code("holdSweepIntervalSeconds", \.holdSweepIntervalSeconds, 1...3_600),
            code("holdSweepWalletsMax", \.holdSweepWalletsMax, 1...100_000),
            code("apple.verifyReceiptTimeoutSeconds", \.apple.verifyReceiptTimeoutSeconds, 1...120),
        ]
    }

    struct BooleanSetting {
        let variable: String
        let value: WritableKeyPath<Configuration, Bool>
    }

    static var booleanSettings: [BooleanSetting] {
        [
            BooleanSetting(variable: "WALLET_DATABASE_PREPARED_STATEMENTS", value: \.databasePreparedStatements),
            BooleanSetting(variable: "WALLET_ADMIN_CONSOLE", value: \.adminConsole),
            BooleanSetting(variable: "WALLET_WEBHOOKS_ALLOW_HTTP", value: \.webhooksAllowHTTP),
            BooleanSetting(variable: "WALLET_CREDIT_FROM_NOTIFICATIONS", value: \.creditFromNotifications),
            BooleanSetting(variable: "WALLET_SPEND_PAID_FIRST", value: \.spendPaidFirst),
            BooleanSetting(variable: "WALLET_APPLE_REQUIRE_ACCOUNT_TOKEN", value: \.apple.requireAccountToken),
            BooleanSetting(variable: "WALLET_APPLE_CONSUMPTION_CONSENT", value: \.apple.api.consumptionConsent),
            BooleanSetting(variable: "WALLET_GOOGLE_ALLOW_TEST_PURCHASES", value: \.google.allowTestPurchases),
            BooleanSetting(variable: "WALLET_GOOGLE_REQUIRE_ACCOUNT_ID", value: \.google.requireAccountID),
        ]
    }

    /// The stores' addresses. The database's is libpq's conninfo, text.
    struct URLSetting {
        let variable: String
        let value: WritableKeyPath<Configuration, URL>
    }

    static var urlSettings: [URLSetting] {
        [
            URLSetting(variable: "WALLET_APPLE_VERIFY_RECEIPT_URL", value: \.apple.verifyReceiptURL),
            URLSetting(variable: "WALLET_APPLE_VERIFY_RECEIPT_SANDBOX_URL", value: \.apple.verifyReceiptSandboxURL),
            URLSetting(variable: "WALLET_APPLE_API_PRODUCTION_URL", value: \.apple.api.productionURL),
            URLSetting(variable: "WALLET_APPLE_API_SANDBOX_URL", value: \.apple.api.sandboxURL),
            URLSetting(variable: "WALLET_GOOGLE_API_URL", value: \.google.apiURL),
            URLSetting(variable: "WALLET_GOOGLE_PUSH_JWKS_URL", value: \.google.pushJWKSURL),
            URLSetting(variable: "WALLET_GOOGLE_PUBSUB_URL", value: \.google.pubSubURL),
        ]
    }

    // MARK: Grammars

    /// `true` or `false`, exactly: the one spelling of a boolean setting.
    static func parseBoolean(_ text: String, variable: String) throws(ConfigurationError) -> Bool {
        switch text {
        case "true": return true
        case "false": return false
        default: throw ConfigurationError(variable: variable, message: "must be true or false")
        }
    }

    /// An absolute http or https URL with a host (and a port, if any, that
    /// exists). Anything else stops start-up: there is no fallback.
    static func parseURL(_ text: String, variable: String) throws(ConfigurationError) -> URL {
        guard let url = URL(string: text), let scheme = url.scheme?.lowercased(), ["http", "https"].contains(scheme),
              let host = url.host, !host.isEmpty, (url.port ?? 1) >= 1, (url.port ?? 1) <= 65_535 else {
            throw ConfigurationError(variable: variable,
                                     message: "must be an http or https URL with a host, such as https://example.com/path")
        }
        return url
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

    /// Reads variables, remembering each name asked for, and the name of the
    /// last one (or its flag) for messages.
    struct Reader {
        let environment: [String: String]
        let flags: [String: String]
        var lastName = ""
        private(set) var names: [String] = []
        /// The flag of each variable that has one.
        private(set) var flagNames: [String: String] = [:]

        init(environment: [String: String], flags: [String: String]) {
            self.environment = environment
            self.flags = flags
        }

        /// Surrounding blanks dropped; nil when nothing is left.
        static func trimmed(_ text: String) -> String? {
            let value = text.trimmingCharacters(in: .whitespaces)
            return value.isEmpty ? nil : value
        }

        mutating func string(_ name: String, flag: String? = nil) -> String? {
            if !names.contains(name) { names.append(name) }
            if let flag {
                flagNames[name] = "--" + flag
            }
            if let flag, let value = flags[flag] {
                lastName = "--" + flag
                return value
            }
            lastName = name
            return environment[name].flatMap(Self.trimmed)
        }

        mutating func list(_ name: String) -> [String]? {
            guard let text = string(name) else { return nil }
            return text.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
        }
    }
}
