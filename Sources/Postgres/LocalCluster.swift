import Foundation
import Locking
public import Logging

/// A PostgreSQL cluster on this machine, made with `initdb` and run with
/// `pg_ctl`, for the embedded development database and for tests.
///
/// - It listens on a unix socket only (and on 127.0.0.1 when asked), in its
///   own directory.
/// - PostgreSQL refuses to run as root. When this process is root, every
///   PostgreSQL program runs as the `postgres` system user, which then owns
///   the cluster directory and must be able to reach it.
public struct LocalCluster: Sendable {
    public enum LauncherError: Error, CustomStringConvertible, Equatable {
        case binariesNotFound
        case serverUserMissing
        case notReachable(path: String)
        case commandFailed(command: String, status: Int32, output: String)
        case timedOut(command: String)

        public var description: String {
            switch self {
            case .binariesNotFound:
                "PostgreSQL server programs (initdb, pg_ctl) were not found on PATH or under /usr/lib/postgresql/*/bin; install them with: apt-get install postgresql-15"
            case .serverUserMissing:
                "running as root, but there is no 'postgres' system user to run PostgreSQL as; install the Debian package postgresql-15, which creates it"
            case .notReachable(let path):
                "the 'postgres' system user cannot reach \(path) (a parent directory is private, such as a home directory of mode 0700)"
            case .commandFailed(let command, let status, let output):
                "\(command) failed with status \(status): \(output)"
            case .timedOut(let command):
                "\(command) did not finish in time"
            }
        }
    }

    public struct Configuration: Sendable {
        /// Holds `pgdata/`, the log, and (when short enough) the socket.
        public var directory: String
        public var port: Int = 5432
        /// Also listen on 127.0.0.1:`port`, for tools that need TCP.
        public var listenOnLoopback = false
        /// Extra `postgresql.conf` settings, written when the cluster is created.
        public var settings: [String: String] = [:]
        public var startTimeoutSeconds = 60

        public init(directory: String) {
            self.directory = directory
        }
    }

    /// The superuser `initdb` creates.
    public static let superuser = "postgres"
    /// The longest unix socket path the kernel accepts (sun_path less its NUL).
    static let socketPathBytesMax = 107

    public let configuration: Configuration
    public let binDirectory: String
    public let dataDirectory: String
    public let socketDirectory: String
    public let logFile: String
    private let runsAsServerUser: Bool
    private let logger: Logger

    public init(configuration: Configuration, logger: Logger) throws(LauncherError) {
        self.configuration = configuration
        self.logger = logger
        binDirectory = try Self.findBinaries()
        runsAsServerUser = geteuid() == 0
        if runsAsServerUser, getpwnam(Self.superuser) == nil { throw .serverUserMissing }
        let directory = URL(fileURLWithPath: configuration.directory).standardizedFileURL.path
        dataDirectory = directory + "/pgdata"
        logFile = directory + "/postgres.log"
        let socketName = "/.s.PGSQL.\(configuration.port)"
        if (directory + socketName).utf8.count <= Self.socketPathBytesMax {
            socketDirectory = directory
        } else {
            // Deep paths do not fit a unix socket; use a short, stable one.
            var hash: UInt64 = 0xcbf2_9ce4_8422_2325
            for byte in directory.utf8 { hash = (hash ^ UInt64(byte)) &* 0x0000_0100_0000_01b3 }
            socketDirectory = NSTemporaryDirectory().appending("wallet-pg-\(String(hash, radix: 36))")
        }
    }

    /// Finds `initdb` and `pg_ctl`: on PATH first (links followed), then the newest
    /// `/usr/lib/postgresql/*/bin`.
    public static func findBinaries() throws(LauncherError) -> String {
        let manager = FileManager.default
        let path = ProcessInfo.processInfo.environment["PATH"] ?? ""
        for directory in path.split(separator: ":").map(String.init)
        where manager.isExecutableFile(atPath: directory + "/initdb") && manager.isExecutableFile(atPath: directory + "/pg_ctl") {
            // A link on PATH leads to the installation's own directory,
            // which has the other tools (pg_basebackup) too.
            return URL(fileURLWithPath: directory + "/initdb").resolvingSymlinksInPath().deletingLastPathComponent().path
        }
        let versions = ((try? manager.contentsOfDirectory(atPath: "/usr/lib/postgresql")) ?? [])
            .compactMap(Int.init).sorted(by: >)
        for version in versions {
            let directory = "/usr/lib/postgresql/\(version)/bin"
            if manager.isExecutableFile(atPath: directory + "/initdb") { return directory }
        }
        throw .binariesNotFound
    }

    /// A libpq conninfo string for a database of this cluster.
    public func conninfo(database: String = "postgres") -> String {
        "host=\(socketDirectory) port=\(configuration.port) user=\(Self.superuser) dbname=\(database)"
    }

    public var exists: Bool {
        FileManager.default.fileExists(atPath: dataDirectory + "/PG_VERSION")
    }

    /// Creates the cluster unless it exists. Returns true when it made one.
    @discardableResult
    public func createIfNeeded() throws(LauncherError) -> Bool {
        try prepareDirectory(configuration.directory)
        if socketDirectory != configuration.directory { try prepareDirectory(socketDirectory) }
        guard !exists else { return false }
        try run("initdb", ["-D", dataDirectory, "-U", Self.superuser, "--auth=trust", "--encoding=UTF8",
                           "--locale=C", "--no-instructions"], timeoutSeconds: 120)
        try appendOwnSettings()
        logger.info("database cluster created", ["db.data_dir": dataDirectory])
        return true
    }

    /// Creates this cluster, unless it exists, as a streaming standby of
    /// `primary` (which must be running): a base backup that follows the
    /// primary's WAL from then on. The primary counts it as synchronous when
    /// its `synchronous_standby_names` says so (`'*'` takes any standby).
    public func createStandby(of primary: LocalCluster) throws(LauncherError) {
        try prepareDirectory(configuration.directory)
        if socketDirectory != configuration.directory { try prepareDirectory(socketDirectory) }
        guard !exists else { return }
        try run("pg_basebackup", ["-D", dataDirectory, "-h", primary.socketDirectory,
                                  "-p", String(primary.configuration.port), "-U", Self.superuser,
                                  "-R", "-X", "stream", "--checkpoint=fast"], timeoutSeconds: 120)
        // The copy carries the primary's own settings; the lines added
        // after them win.
        try appendOwnSettings()
        logger.info("standby cluster created", ["db.data_dir": dataDirectory])
    }

    /// Appends this cluster's port, socket and `configuration.settings` to
    /// its `postgresql.conf`.
    private func appendOwnSettings() throws(LauncherError) {
        var settings: [String: String] = [
            "listen_addresses": configuration.listenOnLoopback ? "'127.0.0.1'" : "''",
            "port": String(configuration.port),
            "unix_socket_directories": "'\(socketDirectory)'",
            "logging_collector": "off",
        ]
        for (key, value) in configuration.settings { settings[key] = value }
        let lines = settings.keys.sorted().map { "\($0) = \(settings[$0]!)" }.joined(separator: "\n")
        let conf = dataDirectory + "/postgresql.conf"
        do {
            let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: conf))
            defer { try? handle.close() }
            try handle.seekToEnd()
            try handle.write(contentsOf: Data(("\n# written by wallet\n" + lines + "\n").utf8))
        } catch {
            throw .commandFailed(command: "write \(conf)", status: -1, output: "\(error)")
        }
    }

    public var isRunning: Bool {
        (try? run("pg_ctl", ["status", "-D", dataDirectory], timeoutSeconds: 10, allowFailure: true)) == 0
    }

    /// Starts the server and waits until it accepts connections.
    public func start() throws(LauncherError) {
        if isRunning { return }
        try run("pg_ctl", ["start", "-D", dataDirectory, "-l", logFile, "-w",
                           "-t", String(configuration.startTimeoutSeconds)],
                timeoutSeconds: configuration.startTimeoutSeconds + 10)
        logger.info("database started", ["db.socket_dir": socketDirectory])
    }

    public enum StopMode: String, Sendable {
        case smart, fast, immediate
    }

    public func stop(mode: StopMode = .fast) throws(LauncherError) {
        guard isRunning else { return }
        try run("pg_ctl", ["stop", "-D", dataDirectory, "-m", mode.rawValue, "-w", "-t", "60"], timeoutSeconds: 70)
        logger.info("database stopped", ["db.data_dir": dataDirectory])
    }

    public func restart(mode: StopMode = .fast) throws(LauncherError) {
        try run("pg_ctl", ["restart", "-D", dataDirectory, "-l", logFile, "-m", mode.rawValue, "-w",
                           "-t", String(configuration.startTimeoutSeconds)],
                timeoutSeconds: configuration.startTimeoutSeconds + 70)
    }

    /// Makes a directory the server user owns and can reach.
    private func prepareDirectory(_ path: String) throws(LauncherError) {
        do {
            // Parents keep the default mode so the server user can pass through them.
            try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
            try FileManager.default.setAttributes([.posixPermissions: 0o700], ofItemAtPath: path)
        } catch {
            throw .commandFailed(command: "mkdir \(path)", status: -1, output: "\(error)")
        }
        guard runsAsServerUser else { return }
        guard let user = getpwnam(Self.superuser) else { throw .serverUserMissing }
        if chown(path, user.pointee.pw_uid, user.pointee.pw_gid) != 0 {
            throw .commandFailed(command: "chown \(path)", status: errno, output: String(cString: strerror(errno)))
        }
        guard Self.serverUserCanReach(path) else { throw .notReachable(path: path) }
    }

    /// Whether the `postgres` user can enter `path` (always true when not root).
    public static func serverUserCanReach(_ path: String) -> Bool {
        guard geteuid() == 0 else { return true }
        let status = try? execute("/usr/sbin/runuser", ["-u", superuser, "--", "test", "-x", path, "-a", "-r", path],
                                  timeoutSeconds: 10, outputPath: nil)
        return status == 0
    }

    @discardableResult
    private func run(_ program: String, _ arguments: [String], timeoutSeconds: Int,
                     allowFailure: Bool = false) throws(LauncherError) -> Int32 {
        let binary = binDirectory + "/" + program
        let executable = runsAsServerUser ? "/usr/sbin/runuser" : binary
        let fullArguments = runsAsServerUser ? ["-u", Self.superuser, "--", binary] + arguments : arguments
        let outputPath = NSTemporaryDirectory() + "wallet-\(program)-\(UUID().uuidString).out"
        defer { try? FileManager.default.removeItem(atPath: outputPath) }
        let status = try Self.execute(executable, fullArguments, timeoutSeconds: timeoutSeconds, outputPath: outputPath)
        if status != 0, !allowFailure {
            let output = (try? String(contentsOfFile: outputPath, encoding: .utf8)) ?? ""
            throw .commandFailed(command: program + " " + (arguments.first ?? ""), status: status,
                                 output: String(output.suffix(2000)).trimmingCharacters(in: .whitespacesAndNewlines))
        }
        return status
    }

    /// Runs a program to completion with a deadline. Output goes to a file,
    /// never a pipe, and every inherited descriptor above stderr is closed:
    /// `pg_ctl start` leaves a server behind, which must hold nothing of ours.
    static func execute(_ executable: String, _ arguments: [String], timeoutSeconds: Int,
                        outputPath: String?) throws(LauncherError) -> Int32 {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        let output = outputPath ?? "/dev/null"
        posix_spawn_file_actions_addopen(&actions, 1, output, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
        posix_spawn_file_actions_adddup2(&actions, 1, 2)
        let openDescriptors = ((try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd")) ?? [])
            .compactMap(Int32.init).filter { $0 > 2 }
        for descriptor in openDescriptors where fcntl(descriptor, F_GETFD) >= 0 {
            posix_spawn_file_actions_addclose(&actions, descriptor)
        }

        let argv = ([executable] + arguments).map { strdup($0) } + [nil]
        defer { argv.forEach { free($0) } }
        var pid: pid_t = 0
        let spawned = posix_spawn(&pid, executable, &actions, nil, argv, environ)
        guard spawned == 0 else {
            throw .commandFailed(command: executable, status: -1, output: String(cString: strerror(spawned)))
        }
        let child = Child(pid: pid)
        child.startReaping()
        let deadline = ContinuousClock.now + .seconds(timeoutSeconds)
        var end = child.waitForExit(until: deadline)
        if case .exiting = end {
            // It ended just now and is being reaped.
            end = child.waitForExit(until: .now + .seconds(10))
        }
        switch end {
        case .exited(let status):
            // WIFEXITED / WEXITSTATUS, which Swift does not import.
            return status & 0x7f == 0 ? (status >> 8) & 0xff : 128 + (status & 0x7f)
        case .waitFailed(let code):
            throw .commandFailed(command: executable, status: -1, output: String(cString: strerror(code)))
        case .running, .exiting:
            // Killed, so the reaper returns at once; the bound is a backstop.
            _ = child.waitForExit(until: .now + .seconds(10))
            throw .timedOut(command: ([executable] + arguments).joined(separator: " "))
        }
    }
}

/// A spawned process, waited for on a thread of its own so that the caller
/// waits on a condition with a deadline instead of polling `waitpid`.
///
/// The reaper first waits for the exit without reaping (`WNOWAIT`), records
/// it, and only then reaps. `waitForExit` kills a process still running at
/// the deadline under the same lock, so it can never signal a process id
/// that was reaped and given to someone else.
private final class Child: Sendable {
    enum State: Sendable {
        case running
        /// Gone, about to be reaped.
        case exiting
        /// Reaped, with its raw wait status.
        case exited(Int32)
        /// `waitid` or `waitpid` failed, with `errno`.
        case waitFailed(Int32)

        var isOver: Bool {
            switch self {
            case .running, .exiting: false
            case .exited, .waitFailed: true
            }
        }
    }

    private let pid: pid_t
    private let state = Monitor(State.running)

    init(pid: pid_t) {
        self.pid = pid
    }

    func startReaping() {
        let thread = Thread { [self] in
            Thread.nameCurrent("wallet-reaper")
            reap()
        }
        thread.start()
    }

    /// The process's end; or, at the deadline, `.exiting` if it has just
    /// ended, or `.running` if it has not, and has now been sent SIGKILL.
    func waitForExit(until deadline: ContinuousClock.Instant) -> State {
        state.wait(until: deadline, for: \.isOver) { state, _ in
            if case .running = state { kill(pid, SIGKILL) }
            return state
        }
    }

    private func reap() {
        var info = siginfo_t()
        var result: Int32
        repeat {
            result = waitid(P_PID, id_t(pid), &info, WEXITED | WNOWAIT)
        } while result < 0 && errno == EINTR
        guard result == 0 else {
            finish(.waitFailed(errno))
            return
        }
        state.withLock { $0 = .exiting }
        var status: Int32 = 0
        var reaped: pid_t
        repeat {
            reaped = waitpid(pid, &status, 0)
        } while reaped < 0 && errno == EINTR
        finish(reaped == pid ? .exited(status) : .waitFailed(errno))
    }

    private func finish(_ end: State) {
        state.withLock { $0 = end }
        state.broadcast()
    }
}
