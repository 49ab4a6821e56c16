import Foundation
public import Postgres

/// PgBouncer (Debian's `pgbouncer`) in transaction mode in front of a test
/// cluster, on a unix socket of its own.
///
/// `resetEveryTransaction` makes the pooler run `DISCARD ALL` on a server
/// connection after every transaction: whatever a client set for its
/// session is gone by its next transaction, which is the worst a pooled
/// session can do and the case a client must survive. PgBouncer refuses to
/// run as root, so as root it runs as the cluster's `postgres` user.
public final class PgBouncer {
    public let directory: String
    public let port = 6_432
    private let process: Process

    public struct Failure: Error, CustomStringConvertible {
        public var description: String
    }

    public init(before cluster: LocalCluster, database: String, resetEveryTransaction: Bool) throws {
        directory = NSTemporaryDirectory() + "wallet-bouncer-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let user = LocalCluster.superuser
        var settings = """
            [databases]
            \(database) = host=\(cluster.socketDirectory) port=\(cluster.configuration.port) dbname=\(database)

            [pgbouncer]
            listen_addr =
            listen_port = \(port)
            unix_socket_dir = \(directory)
            auth_type = trust
            auth_file = \(directory)/userlist.txt
            pool_mode = transaction
            max_client_conn = 200
            default_pool_size = 20
            logfile = \(directory)/pgbouncer.log
            ignore_startup_parameters = extra_float_digits

            """
        if resetEveryTransaction {
            settings += "server_reset_query = DISCARD ALL\nserver_reset_query_always = 1\n"
        }
        try settings.write(toFile: directory + "/pgbouncer.ini", atomically: true, encoding: .utf8)
        try "\"\(user)\" \"\"\n".write(toFile: directory + "/userlist.txt", atomically: true, encoding: .utf8)
        process = Process()
        let asRoot = geteuid() == 0
        if asRoot {
            guard let account = getpwnam(user) else { throw Failure(description: "no \(user) system user") }
            _ = chown(directory, account.pointee.pw_uid, account.pointee.pw_gid)
            for file in ["pgbouncer.ini", "userlist.txt"] {
                _ = chown(directory + "/" + file, account.pointee.pw_uid, account.pointee.pw_gid)
            }
            process.executableURL = URL(fileURLWithPath: "/usr/sbin/runuser")
            process.arguments = ["-u", user, "--", "pgbouncer", directory + "/pgbouncer.ini"]
        } else {
            process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
            process.arguments = ["pgbouncer", directory + "/pgbouncer.ini"]
        }
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        try process.run()
        let socket = "\(directory)/.s.PGSQL.\(port)"
        guard waitFor(seconds: 20, { FileManager.default.fileExists(atPath: socket) }) else {
            stop()
            throw Failure(description: "pgbouncer did not start: \(log)")
        }
    }

    /// A libpq conninfo string for `database` through the pooler.
    public func conninfo(database: String) -> String {
        "host=\(directory) port=\(port) user=\(LocalCluster.superuser) dbname=\(database)"
    }

    public var log: String {
        (try? String(contentsOfFile: directory + "/pgbouncer.log", encoding: .utf8)) ?? ""
    }

    public func stop() {
        if process.isRunning {
            process.terminate()
            process.waitUntilExit()
        }
        try? FileManager.default.removeItem(atPath: directory)
    }
}
