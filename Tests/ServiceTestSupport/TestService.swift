import Foundation
public import TestSupport
import HTTPServer
public import Locking
import Logging
public import Postgres
@testable public import WalletService
@testable import ServiceSupport
import WalletCore
@testable import WalletStore

/// The real service on a real socket (port 0) over a fresh test database,
/// with three API keys made the way `wallet keys create` makes them.
public final class TestService: @unchecked Sendable {
    public let application: Application
    public let database: Connection.Options
    public let appBackendKey: String
    public let gameServerKey: String
    /// The game server's key for rewards: scopes `grant` and `read`.
    public let rewardsKey: String
    public let adminKey: String
    public var port: UInt16 { application.port }

    /// Starts a service; `configure` may change the configuration first.
    /// Its background work runs on `clock` (a `ManualClock` for a test that
    /// moves time itself).
    public init(database: Connection.Options? = nil, clock: any WorkClock = SystemClock(),
                configure: (inout Configuration) -> Void = { _ in }) throws {
        let database = try database ?? TestDatabase.make()
        self.database = database
        let setup = try Connection(options: database)
        appBackendKey = try APIKeys.create(name: "app-backend", scopes: [.credit, .read], on: setup)
        gameServerKey = try APIKeys.create(name: "game-server", scopes: [.debit, .read], on: setup)
        rewardsKey = try APIKeys.create(name: "game-rewards", scopes: [.grant, .read], on: setup)
        adminKey = try APIKeys.create(name: "admin", scopes: [.admin], on: setup)
        setup.close()

        var configuration = Configuration()
        configuration.databaseURL = Self.conninfo(database)
        configuration.listen = .init(host: "127.0.0.1", port: 0)
        configuration.httpThreads = 4
        configuration.databasePoolSize = 6
        configuration.writers = 2
        configuration.creditVerification = [.caller]
        // Test threads stand in for many clients, all from 127.0.0.1: that
        // address may have every connection unless a test says otherwise.
        configuration.connectionsPerIPMax = configuration.connectionsMax
        configure(&configuration)
        // What `Configuration.load` checks for a configuration it reads.
        try configuration.validate()
        application = try buildApplication(configuration: configuration,
                                           logger: Logger(label: "wallet", level: .error, sink: .discard), clock: clock)
        try application.start()
        guard application.waitUntilReady(timeoutSeconds: 30) else {
            application.shutdown()
            throw TestServiceError.notReady
        }
    }

    /// An application over `database` that is built but not started, for
    /// tests of start-up itself. The database needs no schema yet.
    public static func unstarted(database: Connection.Options) throws -> Application {
        var configuration = Configuration()
        configuration.databaseURL = conninfo(database)
        configuration.listen = .init(host: "127.0.0.1", port: 0)
        configuration.creditVerification = [.caller]
        configuration.connectionsPerIPMax = configuration.connectionsMax
        try configuration.validate()
        return try buildApplication(configuration: configuration,
                                    logger: Logger(label: "wallet", level: .error, sink: .discard))
    }

    enum TestServiceError: Error {
        case notReady
    }

    /// One conninfo string for options that name a database separately.
    public static func conninfo(_ options: Connection.Options) -> String {
        guard let database = options.database else { return options.conninfo }
        return options.conninfo + " dbname=\(database)"
    }

    public func stop() {
        application.shutdown()
    }

    public func client(timeoutSeconds: Double = 10) throws -> HTTPTestClient {
        try HTTPTestClient(port: port, timeoutSeconds: timeoutSeconds)
    }

    /// One request on a fresh connection.
    public func request(_ method: String, _ path: String, key: String? = nil, json: String? = nil,
                        headers: [(name: String, value: String)] = []) throws -> HTTPTestResponse {
        try Self.request(port: port, method, path, key: key, json: json, headers: headers, timeoutSeconds: 10)
    }

    /// One request with a body of any type (a form, say) on a fresh connection.
    public func request(_ method: String, _ path: String, headers: [(name: String, value: String)],
                        body: String) throws -> HTTPTestResponse {
        let client = try HTTPTestClient(port: port, timeoutSeconds: 10)
        defer { client.close() }
        return try client.request(method: method, path: path, headers: headers, body: Array(body.utf8))
    }

    /// One request on a fresh connection to a service on `port`, in this
    /// process or another.
    public static func request(port: UInt16, _ method: String, _ path: String, key: String?, json: String?,
                               headers: [(name: String, value: String)] = [], body: String? = nil,
                               timeoutSeconds: Double = 30) throws -> HTTPTestResponse {
        let client = try HTTPTestClient(port: port, timeoutSeconds: timeoutSeconds)
        defer { client.close() }
        return try client.request(method: method, path: path, headers: Self.headers(key: key, json: json) + headers,
                                  body: Array((body ?? json ?? "").utf8))
    }

    public static func headers(key: String?, json: String?) -> [(name: String, value: String)] {
        var headers: [(name: String, value: String)] = []
        if let key { headers.append(("Authorization", "Bearer \(key)")) }
        if json != nil { headers.append(("Content-Type", "application/json")) }
        return headers
    }

    public func credit(userID: String, flowNo: String, productID: String = "guodong600", quantity: Int? = nil,
                       key: String? = nil) throws -> HTTPTestResponse {
        var body = #"{"user_id":"\#(userID)","flow_no":"\#(flowNo)","product_id":"\#(productID)""#
        if let quantity { body += #","quantity":\#(quantity)"# }
        body += "}"
        return try request("POST", "/v1/credits", key: key ?? appBackendKey, json: body)
    }

    public func debit(userID: String, amount: Int64, idempotencyKey: String, currency: String? = nil,
                      key: String? = nil) throws -> HTTPTestResponse {
        var body = #"{"user_id":"\#(userID)","amount":\#(amount)"#
        if let currency { body += #","currency":"\#(currency)""# }
        body += "}"
        return try request("POST", "/v1/debits", key: key ?? gameServerKey, json: body,
                           headers: [("Idempotency-Key", idempotencyKey)])
    }

    /// `POST /v1/grants` under `idempotencyKey`, with the rewards key.
    public func grant(userID: String, amount: Int64, idempotencyKey: String, reason: String = "daily reward",
                      currency: String? = nil, expiresInDays: Int? = nil, key: String? = nil) throws -> HTTPTestResponse {
        var body = #"{"user_id":"\#(userID)","amount":\#(amount),"reason":"\#(reason)""#
        if let currency { body += #","currency":"\#(currency)""# }
        if let expiresInDays { body += #","expires_in_days":\#(expiresInDays)"# }
        body += "}"
        return try request("POST", "/v1/grants", key: key ?? rewardsKey, json: body,
                           headers: [("Idempotency-Key", idempotencyKey)])
    }

    /// The current balance, read straight from the database (0 for no wallet).
    public func balance(of userID: String, currency: String = "coin") throws -> Int64 {
        let connection = try Connection(options: database)
        defer { connection.close() }
        return try connection.query("""
            SELECT coalesce((SELECT balance FROM wallet.wallets WHERE user_id = \(userID) AND currency = \(currency)), 0)
            """)[0].decode(Int64.self, at: 0)
    }

    /// `wallet.check_invariants()`, as `wallet check` runs it.
    public func violations() throws -> [String] {
        let connection = try Connection(options: database)
        defer { connection.close() }
        return try connection.query("SELECT invariant || ' ' || subject || ' ' || detail FROM wallet.check_invariants()")
            .map { try $0.decode(String.self, at: 0) }
    }

    public func count(_ sql: String) throws -> Int {
        let connection = try Connection(options: database)
        defer { connection.close() }
        return try connection.query(PostgresQuery(unsafeSQL: sql))[0].decode(Int.self, at: 0)
    }
}
