import Foundation
public import Logging
import Postgres
public import WalletCore

/// The operator's work on the ledger database (`wallet migrate`, `keys`,
/// `check`): one connection to the configured database, or to the embedded
/// one (`DatabaseEndpoint`), which is started for the duration when
/// `wallet serve` is not running it.
public final class Administration {
    /// Most any one statement may take; the migrations and the ledger-wide
    /// check lift it (they take what they take).
    static let statementTimeoutMilliseconds = 60_000

    let connection: Connection
    private let logger: Logger

    private init(connection: Connection, logger: Logger) {
        self.connection = connection
        self.logger = logger
    }

    /// Connects to `database`, migrating it first when `migrateFirst` is
    /// set, runs `body`, and disconnects. With a `deadline`, connecting and
    /// every statement end by it.
    public static func withConnection<T>(to database: DatabaseEndpoint, logger: Logger, migrateFirst: Bool = false,
                                         deadline: ContinuousClock.Instant? = nil,
                                         _ body: (Administration) throws -> T) throws -> T {
        var options = Connection.Options(conninfo: database.conninfo)
        options.statementTimeoutMilliseconds = statementTimeoutMilliseconds
        let connection = try Connection(options: options, deadline: deadline)
        defer { connection.close() }
        let administration = Administration(connection: connection, logger: logger)
        if migrateFirst {
            try administration.migrate()
        }
        return try body(administration)
    }

    /// Applies the migrations and function files this build carries and
    /// returns the names of those applied now.
    @discardableResult
    public func migrate() throws -> [String] {
        let migrator = try Schema.migrator(logger: logger)
        return try connection.withoutStatementTimeout { try migrator.migrate(connection: $0) }
    }

    /// The migrations and function files `migrate` would apply now, read
    /// without changing anything.
    public func pendingMigrations() throws -> [String] {
        try Schema.migrator(logger: logger).pending(connection: connection)
    }

    /// The Google Play id of one active product of the catalog (the first by
    /// catalog id), for a lookup that names a real product; nil when none is
    /// on sale.
    public func googlePlayProductIDOnSale() throws -> String? {
        try LedgerStore.googlePlayProductIDOnSale(on: connection)
    }

    /// Runs `wallet.check_invariants()`; an empty answer means the books balance.
    public func checkInvariants() throws -> [InvariantViolation] {
        try connection.withoutStatementTimeout { try LedgerStore.checkInvariants(on: $0) }
    }

    /// `credit,read` and the like: known scopes, each once, in order.
    public static func parseScopes(_ text: String) throws -> [Scope] {
        try APIKeys.parseScopes(text)
    }

    /// Stores a new key and returns its secret, which is never stored.
    /// Like every write, it carries its transaction's settings: behind a
    /// pooler the connection's own may not apply.
    public func createKey(name: String, scopes: [Scope]) throws -> String {
        try connection.withLocalSettings { try APIKeys.create(name: name, scopes: scopes, on: $0) }
    }

    public func listKeys() throws -> [APIKeyInfo] {
        try APIKeys.list(on: connection)
    }

    /// Revokes the live key with this name; running services refuse it
    /// within seconds.
    public func revokeKey(name: String) throws {
        try connection.withLocalSettings { try APIKeys.revoke(name: name, on: $0) }
    }
}

/// The keys made on the first start of an empty development database.
public struct DevelopmentKeys: Sendable {
    public let appBackend: String
    public let gameServer: String
    /// `support-console`, with the `console` scope only.
    public let console: String
}
