import Foundation
import Locking
import Logging
public import Postgres
import Synchronization
@testable import WalletStore

/// Databases for tests.
///
/// The first call starts a throwaway PostgreSQL cluster in a temp directory
/// (or uses `WALLET_TEST_DATABASE_URL` when it is set) and builds a template
/// database with every migration applied. Each test then gets its own copy of
/// the template, so tests running in parallel never see each other's rows.
/// A database that cannot be had is an error: tests fail, they never skip.
public enum TestDatabase {
    /// A new database with the schema in place; returns its connection options.
    public static func make() throws -> Connection.Options {
        let base = try shared()
        let name = "wallet_test_\(getpid())_\(counter.add(1, ordering: .relaxed).newValue)"
        try creationLock.withLock { _ in
            let admin = try Connection(options: base)
            try admin.execute("CREATE DATABASE \(unsafeSQL: name) TEMPLATE \(unsafeSQL: templateName)")
        }
        var options = base
        options.database = name
        return options
    }

    /// A database with no migrations applied, for migrator tests.
    public static func makeEmpty() throws -> Connection.Options {
        let base = try shared()
        let name = "wallet_empty_\(getpid())_\(counter.add(1, ordering: .relaxed).newValue)"
        let admin = try Connection(options: base)
        try admin.execute("CREATE DATABASE \(unsafeSQL: name) TEMPLATE template0")
        var options = base
        options.database = name
        return options
    }

    /// Waits until at least `count` sessions of `connection`'s database wait
    /// for a lock, at most `seconds`. A test that holds a row lock uses it
    /// to know its request has reached the lock, instead of guessing a time.
    public static func waitForLockWaiters(_ count: Int = 1, on connection: Connection, seconds: Double = 30) -> Bool {
        waitFor(seconds: seconds) {
            let waiting = try? connection.query("""
                SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'
                """)[0].decode(Int.self, at: 0)
            return (waiting ?? 0) >= count
        }
    }

    /// A pool over a new database, with sizes suited to tests.
    public static func makePool(maximumConnections: Int = 8) throws -> ConnectionPool {
        var configuration = ConnectionPool.Configuration(connection: try make())
        configuration.maximumConnections = maximumConnections
        return ConnectionPool(configuration: configuration, logger: Logger(label: "test", level: .error, sink: .discard))
    }

    static let templateName = "wallet_test_template_\(getpid())"
    private static let counter = Atomic<Int>(0)
    private static let creationLock = Locked<Void>(())
    private static let state = Locked<Result<Connection.Options, any Error>?>(nil)

    /// Options for the maintenance database of the shared test cluster.
    static func shared() throws -> Connection.Options {
        try state.withLock { state in
            if state == nil { state = Result { try bootstrap() } }
            return try state!.get()
        }
    }

    private static func bootstrap() throws -> Connection.Options {
        let base: Connection.Options
        if let url = ProcessInfo.processInfo.environment["WALLET_TEST_DATABASE_URL"], !url.isEmpty {
            base = Connection.Options(conninfo: url)
        } else {
            let cluster = try TestCluster.start(name: "shared")
            base = Connection.Options(conninfo: cluster.conninfo())
        }
        var admin = base
        admin.statementTimeoutMilliseconds = 120_000
        let connection = try Connection(options: admin)
        try connection.execute("DROP DATABASE IF EXISTS \(unsafeSQL: templateName)")
        try connection.execute("CREATE DATABASE \(unsafeSQL: templateName)")
        var template = admin
        template.database = templateName
        let migrator = try Schema.migrator(logger: Logger(label: "test", level: .error, sink: .discard))
        try migrator.migrate(connection: try Connection(options: template))
        return base
    }
}

/// A private PostgreSQL cluster: for the shared test database, and for tests
/// that stop or restart the server and must not disturb the others.
/// Clusters still running when the test process exits are stopped then.
public enum TestCluster {
    public static func start(name: String, port: Int = 5432, listenOnLoopback: Bool = false,
                             settings: [String: String] = [:]) throws -> LocalCluster {
        let cluster = try make(name: name, port: port, listenOnLoopback: listenOnLoopback, settings: settings)
        try cluster.createIfNeeded()
        try cluster.start()
        return cluster
    }

    /// A streaming standby of `primary`, started.
    public static func startStandby(of primary: LocalCluster, name: String) throws -> LocalCluster {
        let cluster = try make(name: name, port: primary.configuration.port, listenOnLoopback: false, settings: [:])
        try cluster.createStandby(of: primary)
        try cluster.start()
        return cluster
    }

    private static func make(name: String, port: Int, listenOnLoopback: Bool,
                             settings: [String: String]) throws -> LocalCluster {
        sweepOnce
        let directory = NSTemporaryDirectory() + "wallet-test-\(getpid())-\(name)-\(UUID().uuidString.prefix(8))"
        var configuration = LocalCluster.Configuration(directory: directory)
        configuration.port = port
        configuration.listenOnLoopback = listenOnLoopback
        // Throwaway data: durability buys nothing here, speed does. (The
        // service asks for synchronous_commit itself, per transaction.)
        configuration.settings = [
            "fsync": "off",
            "full_page_writes": "off",
            "synchronous_commit": "off",
            "max_connections": "300",
        ]
        for (key, value) in settings { configuration.settings[key] = value }
        let cluster = try LocalCluster(configuration: configuration, logger: Logger(label: "test-cluster", level: .error))
        register(cluster)
        return cluster
    }

    /// Stops a cluster and deletes its files.
    public static func destroy(_ cluster: LocalCluster) {
        try? cluster.stop(mode: .immediate)
        try? FileManager.default.removeItem(atPath: cluster.configuration.directory)
        running.withLock { $0.removeAll { $0.dataDirectory == cluster.dataDirectory } }
    }

    private static let running = Locked<[LocalCluster]>([])

    /// Clusters left by test processes that died without stopping them (a
    /// crash skips the exit handler) are stopped and removed, once per run.
    private static let sweepOnce: Void = {
        let temp = NSTemporaryDirectory()
        let names = (try? FileManager.default.contentsOfDirectory(atPath: temp)) ?? []
        for name in names where name.hasPrefix("wallet-test-") {
            guard let pid = Int32(name.dropFirst("wallet-test-".count).prefix { $0.isNumber }),
                  pid != getpid(), kill(pid, 0) != 0, errno == ESRCH else { continue }
            let directory = temp + name
            let configuration = LocalCluster.Configuration(directory: directory)
            if let cluster = try? LocalCluster(configuration: configuration, logger: Logger(label: "test", sink: .discard)) {
                try? cluster.stop(mode: .immediate)
            }
            try? FileManager.default.removeItem(atPath: directory)
        }
    }()

    private static func register(_ cluster: LocalCluster) {
        let first = running.withLock { list in
            list.append(cluster)
            return list.count == 1
        }
        if first {
            atexit {
                for cluster in TestCluster.running.withLock({ $0 }) {
                    try? cluster.stop(mode: .immediate)
                    try? FileManager.default.removeItem(atPath: cluster.configuration.directory)
                }
            }
        }
    }
}

/// A test rig that reads its database directly, each call on a connection
/// of its own: counts, rows as text, and the invariant check.
public protocol ProbesDatabase {
    var options: Connection.Options { get }
}

extension ProbesDatabase {
    public func count(_ sql: PostgresQuery) throws -> Int {
        let connection = try Connection(options: options)
        defer { connection.close() }
        return try connection.query(sql)[0].decode(Int.self, at: 0)
    }

    /// Every row, each value as text (`NULL` for null).
    public func rows(_ sql: PostgresQuery) throws -> [[String]] {
        let connection = try Connection(options: options)
        defer { connection.close() }
        return try connection.query(sql).map { row in (0..<row.columns.count).map { row[$0] ?? "NULL" } }
    }

    public func execute(_ sql: PostgresQuery) throws {
        let connection = try Connection(options: options)
        defer { connection.close() }
        _ = try connection.query(sql)
    }

    /// How many rules of the books `wallet.check_invariants()` finds broken.
    public func violations() throws -> Int {
        try count("SELECT count(*) FROM wallet.check_invariants()")
    }
}
