import Foundation
import Locking
import Logging
import Postgres
import TestSupport
import WalletClient

#if canImport(Glibc)
import Glibc
#endif

/// The real `wallet serve` on its embedded development database, in a
/// temp directory, on a loopback port it keeps across restarts.
///
/// On first start the service makes its own PostgreSQL under the data
/// directory and prints development keys; a key with the `events` scope is
/// made with `wallet keys create`. A process killed with SIGKILL leaves its
/// PostgreSQL running, and the next `wallet serve` on the same data
/// directory uses it (and then leaves it running on exit), so the cluster
/// is stopped here, with `pg_ctl`, when the test process exits.
final class LiveWallet: Sendable {
    /// The binary under test: `WALLET_BINARY`, else the package's own build.
    static let binary: String = {
        if let path = ProcessInfo.processInfo.environment["WALLET_BINARY"], !path.isEmpty { return path }
        return ServerProcess.walletBinary
    }()

    static let startSecondsMax = 60.0

    let dataDirectory: String
    let port: UInt16
    let environment: [String: String]
    let appBackendKey: String
    let gameServerKey: String
    let eventsKey: String
    /// Where the embedded cluster lives (under the data directory, unless
    /// the `postgres` user could not reach it).
    let clusterDirectory: String
    private let process: Locked<ServerProcess?>

    var baseURL: URL { URL(string: "http://127.0.0.1:\(port)")! }

    func client(_ key: String, retryPolicy: RetryPolicy = RetryPolicy()) -> WalletClient {
        WalletClient(baseURL: baseURL, apiKey: key, retryPolicy: retryPolicy)
    }

    private init(dataDirectory: String, port: UInt16, environment: [String: String], process: ServerProcess,
                 keys: (appBackend: String, gameServer: String, events: String), clusterDirectory: String) {
        self.dataDirectory = dataDirectory
        self.port = port
        self.environment = environment
        self.process = Locked(process)
        appBackendKey = keys.appBackend
        gameServerKey = keys.gameServer
        eventsKey = keys.events
        self.clusterDirectory = clusterDirectory
    }

    struct StartFailed: Error, CustomStringConvertible {
        var description: String
    }

    /// Starts the service on a new data directory and waits until it has
    /// printed its keys. Blocks: call it off the test runner's threads.
    static func start() throws -> LiveWallet {
        let temp = NSTemporaryDirectory()
        let dataDirectory = temp + "wallet-client-test-\(getpid())-\(UUID().uuidString.prefix(8))"
        // The postgres user must be able to pass through it when the tests run as root.
        try FileManager.default.createDirectory(atPath: dataDirectory, withIntermediateDirectories: true,
                                                attributes: [.posixPermissions: 0o755])
        let port = try quietLoopbackPort()
        let environment = ChaosRun.walletEnvironment([
            "WALLET_DATA_DIR": dataDirectory,
            "WALLET_LISTEN": "127.0.0.1:\(port)",
        ])
        let process = try ServerProcess(binary: binary, environment: environment)
        // Registered at once, so that even a failed start is cleaned up at exit.
        register(clusterDirectory: dataDirectory + "/postgres", dataDirectory: dataDirectory, process: process)
        let keysLine = "game-server (debit, grant, read):"
        guard process.waitForOutput(containing: keysLine, seconds: startSecondsMax) else {
            throw StartFailed(description: "wallet serve printed no development keys in time: \(process.output)")
        }
        let output = process.output
        let clusterDirectory = value(after: "development database: embedded PostgreSQL in ", in: output)
            ?? dataDirectory + "/postgres"
        running.withLock { list in
            for index in list.indices where list[index].dataDirectory == dataDirectory {
                list[index].clusterDirectory = clusterDirectory
            }
        }
        guard let appBackend = value(after: "app-backend (credit, read): ", in: output),
              let gameServer = value(after: keysLine + " ", in: output) else {
            throw StartFailed(description: "no development keys in: \(output)")
        }
        let created = try runProcess([binary, "keys", "create", "--name", "client-events", "--scopes", "events"],
                                     environment: environment, timeoutSeconds: 30)
        guard created.status == 0, let events = created.output.split(separator: "\n").last.map(String.init),
              events.hasPrefix("wk_") else {
            throw StartFailed(description: "wallet keys create failed: \(created.output) \(created.error)")
        }
        let wallet = LiveWallet(dataDirectory: dataDirectory, port: port, environment: environment, process: process,
                                keys: (appBackend, gameServer, events), clusterDirectory: clusterDirectory)
        guard wallet.waitUntilReady(seconds: startSecondsMax) else {
            throw StartFailed(description: "wallet serve is not ready: \(process.output)")
        }
        return wallet
    }

    /// SIGKILL, then a new `wallet serve` on the same port and data
    /// directory, ready to serve. Blocks.
    func killAndRestart(seconds: Double = 30) throws {
        process.withLock { $0?.kill() }
        let deadline = Date(timeIntervalSinceNow: seconds)
        // Bounded by the deadline.
        while true {
            let next = try ServerProcess(binary: Self.binary, environment: environment)
            process.withLock { $0 = next }
            Self.replace(process: next, for: dataDirectory)
            let left = deadline.timeIntervalSinceNow
            if (try? next.waitForPort(seconds: max(1, left))) != nil, waitUntilReady(seconds: deadline.timeIntervalSinceNow) {
                return
            }
            next.kill()
            guard Date() < deadline else {
                throw StartFailed(description: "wallet serve did not come back on port \(port): \(next.output)")
            }
            // Start-up failed (a port still held for a moment, say): this
            // pause is the retry's, and the next start is what it waits for.
            Thread.sleep(forTimeInterval: 0.1)
        }
    }

    /// Waits until `GET /readyz` answers 200, at most `seconds`.
    func waitUntilReady(seconds: Double) -> Bool {
        waitFor(seconds: max(0, seconds)) { [port] in
            guard let client = try? HTTPTestClient(port: port, timeoutSeconds: 2) else { return false }
            defer { client.close() }
            return (try? client.request(method: "GET", path: "/readyz"))?.status == 200
        }
    }

    private static func value(after prefix: String, in output: String) -> String? {
        output.split(separator: "\n").lazy.compactMap { line -> String? in
            guard let range = line.range(of: prefix) else { return nil }
            return String(line[range.upperBound...]).trimmingCharacters(in: .whitespaces)
        }.first
    }

    // MARK: - Stopping everything at exit

    private struct Running: Sendable {
        var dataDirectory: String
        var clusterDirectory: String
        var process: ServerProcess
    }

    private static let running = Locked<[Running]>([])

    private static func register(clusterDirectory: String, dataDirectory: String, process: ServerProcess) {
        let first = running.withLock { list in
            list.append(Running(dataDirectory: dataDirectory, clusterDirectory: clusterDirectory, process: process))
            return list.count == 1
        }
        if first { atexit { LiveWallet.stopAll() } }
    }

    private static func replace(process: ServerProcess, for dataDirectory: String) {
        running.withLock { list in
            for index in list.indices where list[index].dataDirectory == dataDirectory { list[index].process = process }
        }
    }

    /// SIGTERM to each service, then its cluster stopped (a service started
    /// after a SIGKILL does not stop it) and its files removed.
    private static func stopAll() {
        for entry in running.withLock({ $0 }) {
            entry.process.signal(SIGTERM)
            if entry.process.waitForExit(seconds: 15) == nil { entry.process.kill() }
            let logger = Logger(label: "wallet-client-tests", level: .error, sink: .discard)
            if let cluster = try? LocalCluster(configuration: .init(directory: entry.clusterDirectory), logger: logger) {
                try? cluster.stop(mode: .fast)
            }
            try? FileManager.default.removeItem(atPath: entry.dataDirectory)
            try? FileManager.default.removeItem(atPath: entry.clusterDirectory)
        }
    }
}

/// A loopback port below the kernel's ephemeral range, free now. The
/// service is restarted on it, and while it is down no outgoing connection
/// can be given this port, so no client can connect to itself on it.
func quietLoopbackPort() throws -> UInt16 {
    let range = (try? String(contentsOfFile: "/proc/sys/net/ipv4/ip_local_port_range", encoding: .utf8)) ?? ""
    let ephemeralLow = range.split(whereSeparator: \.isWhitespace).first.flatMap { Int($0) } ?? 32_768
    let low = 10_000
    let span = max(1, ephemeralLow - low)
    let first = Int(getpid()) * 131 % span
    for step in 0..<1_000 {
        let port = UInt16(low + (first + step * 17) % span)
        if canBindLoopback(port) { return port }
    }
    throw LiveWallet.StartFailed(description: "no free loopback port below \(ephemeralLow)")
}

private func canBindLoopback(_ port: UInt16) -> Bool {
    let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    guard descriptor >= 0 else { return false }
    defer { close(descriptor) }
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_port = port.bigEndian
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    return withUnsafePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(descriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0 }
    }
}

/// The one service every suite of this target shares, started on first use.
enum SharedWallet {
    private static let starting = Locked<Task<LiveWallet, any Error>?>(nil)

    static func get() async throws -> LiveWallet {
        let task = starting.withLock { task in
            if let task { return task }
            let started = Task { try await onOwnThread { try LiveWallet.start() } }
            task = started
            return started
        }
        return try await task.value
    }
}

/// Runs blocking work (process starts, waits with deadlines) on a thread of
/// its own rather than one of the few the concurrency runtime shares.
func onOwnThread<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
    try await withCheckedThrowingContinuation { continuation in
        let thread = Thread { continuation.resume(with: Result { try body() }) }
        thread.stackSize = 4 << 20
        thread.start()
    }
}

/// The shared service with a client per development key, and fresh names
/// so tests never see each other's players.
struct Fixture {
    let wallet: LiveWallet
    /// Scopes credit and read.
    let app: WalletClient
    /// Scopes debit, grant and read.
    let game: WalletClient
    /// Scope events.
    let events: WalletClient

    static func make() async throws -> Fixture {
        let wallet = try await SharedWallet.get()
        return Fixture(wallet: wallet, app: wallet.client(wallet.appBackendKey), game: wallet.client(wallet.gameServerKey),
                       events: wallet.client(wallet.eventsKey))
    }

    /// A name nobody has used: `prefix` and a random suffix.
    func unique(_ prefix: String) -> String {
        "\(prefix)-\(UUID().uuidString.prefix(13).lowercased())"
    }
}
