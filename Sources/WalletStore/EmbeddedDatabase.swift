import Foundation
public import Logging
public import Postgres

/// The development database: a PostgreSQL cluster under the data directory,
/// made on first use, started with the service and stopped with it.
///
/// When `wallet serve` already runs it, other commands use its socket and
/// leave it running; otherwise they start it for their own duration.
public struct EmbeddedDatabase: Sendable {
    public static let databaseName = "wallet"

    public let cluster: LocalCluster
    /// The cluster's directory, which differs from the configured one when
    /// the `postgres` user could not reach that.
    public let directory: String
    public let usedFallback: Bool
    /// True when this process started the server and so should stop it.
    public let startedHere: Bool

    public var conninfo: String { cluster.conninfo(database: Self.databaseName) }

    /// Makes (if needed) and starts (if not running) the cluster.
    public static func start(dataDirectory: String, logger: Logger) throws -> EmbeddedDatabase {
        let manager = FileManager.default
        let absolute = URL(fileURLWithPath: dataDirectory).standardizedFileURL.path
        try manager.createDirectory(atPath: absolute, withIntermediateDirectories: true)
        var directory = absolute + "/postgres"
        var usedFallback = false
        if !LocalCluster.serverUserCanReach(absolute) {
            // As root, a checkout under a private home directory is out of
            // the postgres user's reach; keep the cluster in the temp dir.
            var hash: UInt64 = 0xcbf2_9ce4_8422_2325
            for byte in absolute.utf8 { hash = (hash ^ UInt64(byte)) &* 0x0000_0100_0000_01b3 }
            directory = NSTemporaryDirectory() + "wallet-dev-\(String(hash, radix: 36))/postgres"
            usedFallback = true
            try manager.createDirectory(atPath: (directory as NSString).deletingLastPathComponent,
                                        withIntermediateDirectories: true,
                                        attributes: [.posixPermissions: 0o755])
        }
        let cluster = try LocalCluster(configuration: .init(directory: directory), logger: logger)
        try cluster.createIfNeeded()
        let wasRunning = cluster.isRunning
        if !wasRunning { try cluster.start() }
        do {
            let admin = try Connection(options: .init(conninfo: cluster.conninfo(database: "postgres")))
            let exists = try admin.query("SELECT 1 FROM pg_database WHERE datname = \(databaseName)").count == 1
            if !exists { try admin.execute("CREATE DATABASE \(unsafeSQL: databaseName)") }
        } catch {
            if !wasRunning { try? cluster.stop() }
            throw error
        }
        return EmbeddedDatabase(cluster: cluster, directory: directory, usedFallback: usedFallback, startedHere: !wasRunning)
    }

    /// Stops the server if this process started it.
    public func stopIfStartedHere() {
        guard startedHere else { return }
        try? cluster.stop(mode: .fast)
    }
}
