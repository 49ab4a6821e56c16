import Foundation
import HTTPServer
import JSON
import Locking
public import Postgres
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

// The chaos harness behind ChaosTests: the run, the service process, the
// fault controller, the retrying clients, what they were told, the audit
// and the report. Other integration tests use its wallet process helpers.

// MARK: - The run

/// One chaos run: its own cluster, the service process, the clients and the
/// controller that injects the faults, then the audit.
public enum ChaosRun {
    /// Seconds of extra fault cycles asked for with WALLET_CHAOS_SECONDS.
    public static let extraSeconds: Int = {
        guard let text = ProcessInfo.processInfo.environment["WALLET_CHAOS_SECONDS"],
              let seconds = Int(text), seconds > 0 else { return 0 }
        return min(seconds, 24 * 3600)
    }()

    public static let timeLimitMinutes = 6 + (extraSeconds + 59) / 60
    static let clientCount = 16
    public static let acknowledgedMin = 2_000
    /// Acknowledgements to wait for between faults, so each fault lands on a
    /// service that has recovered and is busy again.
    static let acknowledgedBetweenFaults = 300
    /// Longest the clients may go without a single acknowledgement.
    static let progressSecondsMax = 60.0
    static let users = (0..<40).map { String(format: "player-%02d", $0) }
    static let products: [(id: String, amount: Int64)] = [("guodong600", 600), ("guodong1200", 1_200), ("guodong5000", 5_000)]
    /// Debits ask for a little more than credits bring on average, so
    /// balances stay near zero and some debits are refused for insufficient
    /// funds all along, however long the run.
    static let debitAmounts: [Int64] = [300, 600, 1_200, 2_500, 5_000]

    public static func perform(extraSeconds: Double, budgetSeconds: Double) throws -> ChaosReport {
        let began = HTTPTestClient.now()
        let cluster = try TestCluster.start(name: "chaos")
        defer { TestCluster.destroy(cluster) }
        let databaseURL = try migratedWalletDatabase(on: cluster)
        let appBackendKey = try walletCommand(["keys", "create", "--name", "app-backend", "--scopes", "credit"],
                                              databaseURL: databaseURL).lastLine
        let gameServerKey = try walletCommand(["keys", "create", "--name", "game-server", "--scopes", "debit"],
                                              databaseURL: databaseURL).lastLine

        let deadline = began + budgetSeconds
        let port = try listenPort()
        let service = ChaosService(binary: ServerProcess.walletBinary, port: port, environment: walletEnvironment([
            "WALLET_DATABASE_URL": databaseURL,
            "WALLET_CREDIT_VERIFICATION": "caller",
            "WALLET_LISTEN": "127.0.0.1:\(port)",
            "WALLET_LOG_LEVEL": "error",
        ]))
        defer { service.kill() }
        _ = try service.start(deadline: min(deadline, HTTPTestClient.now() + 90))

        let shared = ChaosShared(port: port, appBackendKey: appBackendKey, gameServerKey: gameServerKey,
                                 deadline: deadline)
        let clients = DispatchGroup()
        for index in 0..<clientCount {
            clients.enter()
            let thread = Thread {
                var client = ChaosClient(index: index, shared: shared)
                client.run()
                clients.leave()
            }
            thread.stackSize = 1 << 20
            thread.start()
        }

        let trafficBegan = HTTPTestClient.now()
        let controller = ChaosController(shared: shared, service: service, cluster: cluster)
        controller.run(extraSeconds: extraSeconds)
        shared.stopping.store(true, ordering: .relaxed)
        if clients.wait(timeout: .now() + max(30, deadline - HTTPTestClient.now())) == .timedOut {
            shared.givingUp.store(true, ordering: .relaxed)
            shared.tally.problem("client threads were still busy at the deadline")
            _ = clients.wait(timeout: .now() + 30)
        }
        let trafficSeconds = HTTPTestClient.now() - trafficBegan
        let stopStatus = service.stop()

        let check = try runProcess([ServerProcess.walletBinary, "check"],
                                   environment: walletEnvironment(["WALLET_DATABASE_URL": databaseURL]))
        let state = shared.tally.snapshot
        let mismatches = try ChaosAudit.compare(state, databaseURL: databaseURL)
        return ChaosReport(state: state, trafficSeconds: trafficSeconds, mismatches: mismatches,
                           checkStatus: check.status, checkOutput: check.output + check.error, stopStatus: stopStatus)
    }

    /// Creates the database `wallet` on `cluster` and migrates it with
    /// `wallet migrate`, as an operator would; returns its URL.
    public static func migratedWalletDatabase(on cluster: LocalCluster) throws -> String {
        let admin = try Connection(options: .init(conninfo: cluster.conninfo()))
        try admin.execute("CREATE DATABASE wallet")
        admin.close()
        let databaseURL = cluster.conninfo(database: "wallet")
        try walletCommand(["migrate"], databaseURL: databaseURL)
        return databaseURL
    }

    /// The process environment without the caller's WALLET_* settings, plus `extra`.
    public static func walletEnvironment(_ extra: [String: String]) -> [String: String] {
        var environment = ProcessInfo.processInfo.environment.filter { !$0.key.hasPrefix("WALLET_") }
        environment["WALLET_LOG_LEVEL"] = "error"
        for (key, value) in extra { environment[key] = value }
        return environment
    }

    struct CommandFailed: Error, CustomStringConvertible {
        var description: String
    }

    @discardableResult
    public static func walletCommand(_ arguments: [String], databaseURL: String) throws -> (output: String, lastLine: String) {
        let result = try runProcess([ServerProcess.walletBinary] + arguments,
                                    environment: walletEnvironment(["WALLET_DATABASE_URL": databaseURL]))
        guard result.status == 0 else {
            let command = arguments.joined(separator: " ")
            throw CommandFailed(description: "wallet \(command) exited \(result.status): \(result.error)")
        }
        let lines = result.output.split(separator: "\n").filter { !$0.isEmpty }
        return (result.output, String(lines.last ?? ""))
    }

    /// A loopback port the service keeps across restarts, so clients keep one
    /// address. It is taken below the kernel's ephemeral range: while the
    /// service is down, no outgoing connection can be handed this port, and
    /// a client cannot connect to itself on it.
    static func listenPort() throws -> UInt16 {
        let range = (try? String(contentsOfFile: "/proc/sys/net/ipv4/ip_local_port_range", encoding: .utf8)) ?? ""
        let ephemeralLow = range.split(whereSeparator: { $0 == " " || $0 == "\t" || $0 == "\n" }).first
            .flatMap { Int($0) } ?? 32_768
        let low = 10_000
        if ephemeralLow - low > 1_000 {
            let span = ephemeralLow - low
            let first = Int(getpid()) % span
            for step in 0..<512 {
                let port = UInt16(low + (first + step * 7) % span)
                if (try? bindLoopback(port: port)) != nil { return port }
            }
        }
        return try bindLoopback(port: 0)
    }

    struct PortError: Error {
        var errno: Int32
    }

    /// Binds 127.0.0.1:`port` (0: any), closes it again and returns the port.
    private static func bindLoopback(port: UInt16) throws -> UInt16 {
        let socket = Glibc.socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard socket >= 0 else { throw PortError(errno: errno) }
        defer { close(socket) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = port.bigEndian
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(socket, $0, length) == 0 && getsockname(socket, $0, &length) == 0
            }
        }
        guard bound else { throw PortError(errno: errno) }
        return UInt16(bigEndian: address.sin_port)
    }
}

/// What the clients and the controller share.
final class ChaosShared: Sendable {
    let port: UInt16
    let appBackendKey: String
    let gameServerKey: String
    /// Monotonic seconds after which nobody waits any more.
    let deadline: Double
    let tally = ChaosTally()
    /// Clients finish the operation in hand, then stop.
    let stopping = Atomic<Bool>(false)
    /// Clients skip their pause between operations.
    let burst = Atomic<Bool>(false)
    /// Clients stop retrying; set only when the run has already failed.
    let givingUp = Atomic<Bool>(false)
    /// Requests sent and not yet answered.
    let inFlight = Atomic<Int>(0)

    init(port: UInt16, appBackendKey: String, gameServerKey: String, deadline: Double) {
        self.port = port
        self.appBackendKey = appBackendKey
        self.gameServerKey = gameServerKey
        self.deadline = deadline
    }
}

// MARK: - The service process

/// `wallet serve` on a fixed port, killed and started again by the controller.
final class ChaosService {
    let binary: String
    let port: UInt16
    let environment: [String: String]
    private var process: ServerProcess?

    init(binary: String, port: UInt16, environment: [String: String]) {
        self.binary = binary
        self.port = port
        self.environment = environment
    }

    struct NotReady: Error, CustomStringConvertible {
        var description: String
    }

    /// Starts a process and waits until `/readyz` answers 200. Returns the
    /// seconds that took.
    func start(deadline: Double) throws -> Double {
        let began = HTTPTestClient.now()
        while true {
            let process = try ServerProcess(binary: binary, environment: environment)
            self.process = process
            if (try? process.waitForPort(seconds: max(1, deadline - HTTPTestClient.now()))) != nil,
               waitForReady(deadline: deadline) {
                return HTTPTestClient.now() - began
            }
            let output = process.output
            kill()
            guard HTTPTestClient.now() < deadline else {
                throw NotReady(description: "wallet serve was not ready on port \(port) in time: \(output)")
            }
            // Start-up failed, for instance on a port still held for a moment:
            // the pause of this retry, whose next start is what it waits for.
            Thread.sleep(forTimeInterval: 0.25)
        }
    }

    private func waitForReady(deadline: Double) -> Bool {
        waitFor(seconds: max(0, deadline - HTTPTestClient.now())) { [port] in
            guard let client = try? HTTPTestClient(port: port, timeoutSeconds: 5) else { return false }
            defer { client.close() }
            return (try? client.request(method: "GET", path: "/readyz"))?.status == 200
        }
    }

    func kill() {
        process?.kill()
        process = nil
    }

    /// SIGTERM, and the exit status (nil if it had to be killed).
    func stop() -> Int32? {
        guard let process else { return nil }
        process.signal(SIGTERM)
        let status = process.waitForExit(seconds: 30)
        kill()
        return status
    }
}

// MARK: - The controller

/// Injects the faults in order, each once the service is busy again.
struct ChaosController {
    let shared: ChaosShared
    let service: ChaosService
    let cluster: LocalCluster

    struct Stalled: Error, CustomStringConvertible {
        var description: String
    }

    func run(extraSeconds: Double) {
        let began = HTTPTestClient.now()
        do {
            try awaitAcknowledged(ChaosRun.acknowledgedBetweenFaults, while: "warming up")
            var cycle = 0
            repeat {
                cycle += 1
                try killAndRestart(name: "SIGKILL")
                try awaitAcknowledged(ChaosRun.acknowledgedBetweenFaults, while: "recovering from SIGKILL")
                try restartDatabase()
                try awaitAcknowledged(ChaosRun.acknowledgedBetweenFaults, while: "recovering from the database restart")
                try killMidBurst()
                try awaitAcknowledged(ChaosRun.acknowledgedBetweenFaults, while: "recovering from SIGKILL mid-burst")
            } while HTTPTestClient.now() - began < extraSeconds
            let missing = ChaosRun.acknowledgedMin - shared.tally.acknowledged
            if missing > 0 { try awaitAcknowledged(missing, while: "finishing") }
        } catch {
            shared.tally.problem("\(error)")
            shared.givingUp.store(true, ordering: .relaxed)
        }
    }

    private func killAndRestart(name: String) throws {
        let outage = shared.tally.openOutage(name, inFlight: shared.inFlight.load(ordering: .relaxed))
        service.kill()
        let seconds = try service.start(deadline: shared.deadline)
        shared.tally.recordRecovery(outage, seconds: seconds)
    }

    private func restartDatabase() throws {
        let outage = shared.tally.openOutage("pg_ctl restart -m fast", inFlight: shared.inFlight.load(ordering: .relaxed))
        let began = HTTPTestClient.now()
        try cluster.restart(mode: .fast)
        shared.tally.recordRecovery(outage, seconds: HTTPTestClient.now() - began)
    }

    /// Lets every client run flat out, waits until the burst is under way
    /// with most clients waiting for an answer, and kills the service then.
    private func killMidBurst() throws {
        shared.burst.store(true, ordering: .relaxed)
        defer { shared.burst.store(false, ordering: .relaxed) }
        try awaitAcknowledged(100, while: "starting a burst")
        let busyUntil = HTTPTestClient.now() + 10
        while shared.inFlight.load(ordering: .relaxed) < ChaosRun.clientCount / 2, HTTPTestClient.now() < busyUntil {
            // A fine poll of the clients' counter, not a guess: the moment
            // half of them wait for an answer passes within milliseconds.
            usleep(200)
        }
        try killAndRestart(name: "SIGKILL mid-burst")
    }

    /// Waits for `count` more acknowledgements. A minute without a single
    /// one is a hang, whatever the deadline still allows.
    private func awaitAcknowledged(_ count: Int, while phase: String) throws {
        var acknowledged = shared.tally.acknowledged
        let target = acknowledged + count
        var progressed = HTTPTestClient.now()
        while acknowledged < target {
            let now = HTTPTestClient.now()
            guard now < shared.deadline, now - progressed < ChaosRun.progressSecondsMax,
                  !shared.givingUp.load(ordering: .relaxed) else {
                throw Stalled(description: "stalled while \(phase): \(acknowledged) of \(target) acknowledged")
            }
            // The poll's interval; the acknowledgements are what it waits for,
            // and a minute without one is a stall.
            Thread.sleep(forTimeInterval: 0.01)
            let latest = shared.tally.acknowledged
            if latest > acknowledged { progressed = HTTPTestClient.now() }
            acknowledged = latest
        }
    }
}

// MARK: - A client

/// One caller: an app backend crediting purchases and a game server
/// spending coins, on one keep-alive connection, choosing from its own seed.
struct ChaosClient {
    let index: Int
    let shared: ChaosShared
    var random: SplitMix64
    var connection: HTTPTestClient?
    var sequence = 0

    static let requestTimeoutSeconds = 20.0
    /// Longest an operation may go without a definitive answer.
    static let operationSecondsMax = 120.0

    init(index: Int, shared: ChaosShared) {
        self.index = index
        self.shared = shared
        random = SplitMix64(seed: 0xC4A0_5000 &+ UInt64(index) &* 0x9E37_79B9)
    }

    struct Call {
        var path: String
        var headers: [(name: String, value: String)]
        var body: [UInt8]
        var identity: String
    }

    mutating func run() {
        while !shared.stopping.load(ordering: .relaxed) && !shared.givingUp.load(ordering: .relaxed) {
            sequence += 1
            let user = ChaosRun.users[random.below(ChaosRun.users.count)]
            if random.chance(45) {
                credit(user)
            } else if random.chance(25) {
                holdThenSettle(user)
            } else {
                debit(user)
            }
            if !shared.burst.load(ordering: .relaxed) {
                // The client's pace between operations outside a burst: load.
                Thread.sleep(forTimeInterval: Double(5 + random.below(20)) / 1000)
            }
        }
        connection?.close()
    }

    mutating func credit(_ user: String) {
        let product = ChaosRun.products[random.below(ChaosRun.products.count)]
        let flowNo = "chaos-\(index)-\(sequence)"
        let call = Call(
            path: "/v1/credits",
            headers: [("Authorization", "Bearer \(shared.appBackendKey)"), ("Content-Type", "application/json")],
            body: Array(#"{"user_id":"\#(user)","flow_no":"\#(flowNo)","product_id":"\#(product.id)"}"#.utf8),
            identity: "credit \(flowNo)")
        let style = random.below(100)
        let abandoned = style < 5
        if abandoned { abandon(call) }
        guard let answer = untilDefinitive(call) else { return }
        guard answer.response.status == 201 || answer.response.status == 200,
              checkCredit(answer.response, flowNo: flowNo, user: user, amount: product.amount) else {
            shared.tally.problem("\(call.identity): unexpected answer \(describe(answer.response))")
            return
        }
        let replayed = answer.response.status == 200
        if replayed && answer.attempts == 1 && !abandoned {
            shared.tally.problem("\(call.identity): replayed before it was ever sent")
        }
        shared.tally.creditAcknowledged(flowNo, user: user, amount: product.amount, replayed: replayed,
                                        started: answer.started)

        // The app backend sends the same purchase again: it must replay.
        if style >= 85 {
            guard let again = untilDefinitive(call) else { return }
            guard again.response.status == 200,
                  checkCredit(again.response, flowNo: flowNo, user: user, amount: product.amount) else {
                shared.tally.problem("\(call.identity) sent again: unexpected answer \(describe(again.response))")
                return
            }
            shared.tally.duplicateReplayed(started: again.started)
        }
    }

    mutating func debit(_ user: String) {
        let amount = ChaosRun.debitAmounts[random.below(ChaosRun.debitAmounts.count)]
        let key = "chaos-\(index)-\(sequence)"
        let call = Call(
            path: "/v1/debits",
            headers: [("Authorization", "Bearer \(shared.gameServerKey)"), ("Content-Type", "application/json"),
                      ("Idempotency-Key", key)],
            body: Array(#"{"user_id":"\#(user)","amount":\#(amount),"reason":"chaos"}"#.utf8),
            identity: "debit \(key)")
        let abandoned = random.chance(5)
        if abandoned { abandon(call) }
        guard let answer = untilDefinitive(call) else { return }
        let replayed = answer.response.header("Idempotent-Replayed") == "true"
        if replayed && answer.attempts == 1 && !abandoned {
            shared.tally.problem("\(call.identity): replayed before it was ever sent")
        }
        let body = try? answer.response.json()
        switch answer.response.status {
        case 201 where body?["debit"]?["amount"]?.integer == amount && body?["debit"]?["user_id"]?.text == user:
            shared.tally.debitAcknowledged(key, user: user, amount: amount, replayed: replayed, started: answer.started)
        case 409 where body?["code"]?.text == "insufficient_funds":
            shared.tally.debitRefused(key, replayed: replayed, started: answer.started)
        default:
            shared.tally.problem("\(call.identity): unexpected answer \(describe(answer.response))")
        }
    }

    /// A hold, then (mostly) its capture or (sometimes) its release, each
    /// retried with its own key until definitive. A capture is a debit with
    /// reference `hold:{id}`; a release and a refused hold move nothing.
    mutating func holdThenSettle(_ user: String) {
        let amount = ChaosRun.debitAmounts[random.below(ChaosRun.debitAmounts.count)]
        let key = "chaos-hold-\(index)-\(sequence)"
        let place = Call(
            path: "/v1/holds",
            headers: [("Authorization", "Bearer \(shared.gameServerKey)"), ("Content-Type", "application/json"),
                      ("Idempotency-Key", key)],
            body: Array(#"{"user_id":"\#(user)","amount":\#(amount),"reason":"chaos"}"#.utf8),
            identity: "debit \(key)")
        guard let placed = untilDefinitive(place) else { return }
        let replayed = placed.response.header("Idempotent-Replayed") == "true"
        let body = try? placed.response.json()
        switch placed.response.status {
        case 201 where body?["hold"]?["amount"]?.integer == amount:
            break
        case 409 where body?["code"]?.text == "insufficient_funds":
            shared.tally.debitRefused(key, replayed: replayed, started: placed.started)
            return
        default:
            shared.tally.problem("\(place.identity): unexpected answer \(describe(placed.response))")
            return
        }
        guard let id = body?["hold"]?["id"]?.integer else {
            shared.tally.problem("\(place.identity): no hold id")
            return
        }
        shared.tally.holdPlaced(started: placed.started)
        let capture = random.chance(80)
        let action = capture ? "capture" : "release"
        let settle = Call(
            path: "/v1/holds/\(id)/\(action)",
            headers: [("Authorization", "Bearer \(shared.gameServerKey)"), ("Idempotency-Key", "\(key)-\(action)")],
            body: [], identity: "debit hold:\(id)")
        guard let settled = untilDefinitive(settle) else { return }
        let answer = try? settled.response.json()
        switch (capture, settled.response.status) {
        case (true, 201) where answer?["debit"]?["amount"]?.integer == amount:
            shared.tally.debitAcknowledged("hold:\(id)", user: user, amount: amount,
                                           replayed: settled.response.header("Idempotent-Replayed") == "true",
                                           started: settled.started)
        case (false, 200) where answer?["hold"]?["status"]?.text == "released":
            shared.tally.holdReleased(started: settled.started)
        default:
            shared.tally.problem("\(settle.identity) \(action): unexpected answer \(describe(settled.response))")
        }
    }

    private func checkCredit(_ response: HTTPTestResponse, flowNo: String, user: String, amount: Int64) -> Bool {
        guard let credit = (try? response.json())?["credit"] else { return false }
        return credit["flow_no"]?.text == flowNo && credit["user_id"]?.text == user && credit["amount"]?.integer == amount
    }

    private func describe(_ response: HTTPTestResponse) -> String {
        "\(response.status) \(String(response.text.prefix(300)))"
    }

    /// Sends the request and drops the connection at once, as a caller that
    /// crashes or times out would: the answer, if any, is lost.
    private mutating func abandon(_ call: Call) {
        guard let client = try? HTTPTestClient(port: shared.port, timeoutSeconds: 2) else { return }
        try? client.send(HTTPTestClient.requestBytes(method: "POST", path: call.path, headers: call.headers,
                                                     body: call.body, port: shared.port))
        // Gone at a random moment, before or while the service works on it.
        if random.chance(50) { Thread.sleep(forTimeInterval: Double(random.below(20)) / 1000) }
        client.reset()
        shared.tally.abandoned()
    }

    struct Answer {
        var response: HTTPTestResponse
        /// When the attempt that got this answer was sent (monotonic seconds).
        var started: Double
        var attempts: Int
    }

    /// Sends `call` until the answer is definitive (below 500), retrying
    /// with the same identity on connection errors, timeouts and 5xx, with
    /// a small backoff. Nil only when the run is already failing.
    private mutating func untilDefinitive(_ call: Call) -> Answer? {
        let began = HTTPTestClient.now()
        var attempts = 0
        while true {
            attempts += 1
            let started = HTTPTestClient.now()
            shared.inFlight.add(1, ordering: .relaxed)
            let result = Result { () throws -> HTTPTestResponse in
                if connection == nil {
                    connection = try HTTPTestClient(port: shared.port, timeoutSeconds: Self.requestTimeoutSeconds)
                }
                return try connection!.request(method: "POST", path: call.path, headers: call.headers, body: call.body)
            }
            shared.inFlight.subtract(1, ordering: .relaxed)
            let finished = HTTPTestClient.now()
            switch result {
            case .success(let response):
                if response.header("Connection")?.lowercased() == "close" {
                    connection?.close()
                    connection = nil
                }
                if response.status < 500 {
                    return Answer(response: response, started: started, attempts: attempts)
                }
                shared.tally.attemptFailed(.serverError(response.status), at: finished)
                if response.status != 503 {
                    shared.tally.problem("\(call.identity): answered \(describe(response))")
                }
            case .failure(let error):
                connection?.close()
                connection = nil
                shared.tally.attemptFailed(error as? HTTPTestClientError == .timedOut ? .timeout : .connection,
                                           at: finished)
            }
            guard finished - began < Self.operationSecondsMax, finished < shared.deadline,
                  !shared.givingUp.load(ordering: .relaxed) else {
                shared.tally.unresolved(call.identity, attempts: attempts)
                return nil
            }
            // The client's backoff before it retries, as a careful caller's.
            let backoffSeconds = min(0.4, 0.01 * Double(1 << min(attempts, 6))) + Double(random.below(20)) / 1000
            Thread.sleep(forTimeInterval: backoffSeconds)
        }
    }
}

private extension JSONValue {
    var integer: Int64? {
        if case .number(let literal) = self { Int64(literal) } else { nil }
    }

    var text: String? {
        if case .string(let value) = self { value } else { nil }
    }
}

// MARK: - What the clients were told

/// Every acknowledged operation, the retries and the outages.
public final class ChaosTally: Sendable {
    struct Movement: Sendable, Equatable {
        var user: String
        var amount: Int64
    }

    enum FailedAttempt {
        case connection, timeout
        case serverError(Int)
    }

    struct Retries: Sendable {
        var connection = 0
        var timeouts = 0
        var unavailable = 0
        var otherServerErrors = 0
        var total: Int { connection + timeouts + unavailable + otherServerErrors }
    }

    public struct Outage: Sendable {
        public var name: String
        var start: Double
        var inFlight: Int
        /// Restarting the service until ready, or `pg_ctl restart`, in seconds.
        var recoverySeconds: Double?
        /// The first attempt that failed after the fault.
        public var firstFailure: Double?
        var failedAttempts = 0
        /// The first acknowledgement of an attempt sent after that failure.
        public var end: Double?

        var windowMilliseconds: Int? {
            end.map { Int((($0 - start) * 1000).rounded()) }
        }
    }

    struct State: Sendable {
        var credits: [String: Movement] = [:]
        var debits: [String: Movement] = [:]
        var refused: Set<String> = []
        /// Operations that never got a definitive answer; each is also a problem.
        var unresolved: Set<String> = []
        var duplicatesReplayed = 0
        var holdsPlaced = 0
        var holdsReleased = 0
        /// First acknowledgements that were replays: an earlier attempt was
        /// applied but its answer was lost (abandoned, or cut by a fault).
        var lostAnswersReplayed = 0
        var abandoned = 0
        var retries = Retries()
        var outages: [Outage] = []
        var problems: [String] = []
        var problemsDropped = 0

        var acknowledged: Int { credits.count + debits.count + refused.count }
    }

    private let state = Locked(State())

    var snapshot: State { state.withLock { $0 } }
    var acknowledged: Int { state.withLock { $0.acknowledged } }

    func problem(_ text: String) {
        state.withLock { state in
            if state.problems.count < 50 { state.problems.append(text) } else { state.problemsDropped += 1 }
        }
    }

    func creditAcknowledged(_ flowNo: String, user: String, amount: Int64, replayed: Bool, started: Double) {
        acknowledge(started: started) { state in
            if replayed { state.lostAnswersReplayed += 1 }
            if state.credits.updateValue(Movement(user: user, amount: amount), forKey: flowNo) != nil {
                state.problems.append("credit \(flowNo) acknowledged twice as new")
            }
        }
    }

    func debitAcknowledged(_ key: String, user: String, amount: Int64, replayed: Bool, started: Double) {
        acknowledge(started: started) { state in
            if replayed { state.lostAnswersReplayed += 1 }
            if state.debits.updateValue(Movement(user: user, amount: amount), forKey: key) != nil {
                state.problems.append("debit \(key) acknowledged twice")
            }
        }
    }

    func debitRefused(_ key: String, replayed: Bool, started: Double) {
        acknowledge(started: started) { state in
            if replayed { state.lostAnswersReplayed += 1 }
            state.refused.insert(key)
        }
    }

    func holdPlaced(started: Double) {
        acknowledge(started: started) { state in state.holdsPlaced += 1 }
    }

    func holdReleased(started: Double) {
        acknowledge(started: started) { state in state.holdsReleased += 1 }
    }

    func duplicateReplayed(started: Double) {
        acknowledge(started: started) { state in state.duplicatesReplayed += 1 }
    }

    func abandoned() {
        state.withLock { $0.abandoned += 1 }
    }

    func unresolved(_ identity: String, attempts: Int) {
        state.withLock { state in
            state.unresolved.insert(identity)
            state.problems.append("\(identity): no definitive answer after \(attempts) attempts")
        }
    }

    func attemptFailed(_ kind: FailedAttempt, at time: Double) {
        state.withLock { state in
            switch kind {
            case .connection: state.retries.connection += 1
            case .timeout: state.retries.timeouts += 1
            case .serverError(503): state.retries.unavailable += 1
            case .serverError: state.retries.otherServerErrors += 1
            }
            for index in state.outages.indices where state.outages[index].end == nil && time >= state.outages[index].start {
                state.outages[index].failedAttempts += 1
                if state.outages[index].firstFailure == nil { state.outages[index].firstFailure = time }
            }
        }
    }

    /// Opens an outage window now; returns its index.
    func openOutage(_ name: String, inFlight: Int) -> Int {
        state.withLock { state in
            state.outages.append(Outage(name: name, start: HTTPTestClient.now(), inFlight: inFlight))
            return state.outages.count - 1
        }
    }

    func recordRecovery(_ outage: Int, seconds: Double) {
        state.withLock { $0.outages[outage].recoverySeconds = seconds }
    }

    private func acknowledge(started: Double, _ record: (inout State) -> Void) {
        let now = HTTPTestClient.now()
        state.withLock { state in
            record(&state)
            for index in state.outages.indices where state.outages[index].end == nil {
                if let firstFailure = state.outages[index].firstFailure, started >= firstFailure {
                    state.outages[index].end = now
                }
            }
        }
    }
}

// MARK: - The audit

/// Compares the database with what the clients were told.
enum ChaosAudit {
    static func compare(_ told: ChaosTally.State, databaseURL: String) throws -> [String] {
        let connection = try Connection(options: .init(conninfo: databaseURL))
        defer { connection.close() }
        var mismatches: [String] = []

        // The ledger's credits and debits are exactly the acknowledged ones, once each.
        let creditEntries = try movements(kind: "credit", on: connection)
        mismatches += differences("credit", ledger: creditEntries, told: told.credits, unresolved: told.unresolved)
        let debitEntries = try movements(kind: "debit", on: connection)
        mismatches += differences("debit", ledger: debitEntries, told: told.debits, unresolved: told.unresolved)
        for key in told.refused where debitEntries[key] != nil {
            mismatches.append("debit \(key) was refused but is in the ledger")
        }
        for row in try connection.query("""
            SELECT kind, count(*)::bigint FROM wallet.entries WHERE kind NOT IN ('credit', 'debit') GROUP BY kind
            """) {
            mismatches.append("ledger holds \(try row.decode(Int64.self, at: 1)) \(try row.decode(String.self, at: 0)) entries")
        }

        // Each credit row belongs to its entry; each refusal is stored under its key.
        let creditRows = try connection.query("SELECT flow_no, user_id, amount FROM wallet.credits")
        var credits: [String: ChaosTally.Movement] = [:]
        for row in creditRows {
            credits[try row.decode(String.self, at: 0)] = .init(user: try row.decode(String.self, at: 1),
                                                               amount: try row.decode(Int64.self, at: 2))
        }
        if credits != creditEntries.compactMapValues(\.first) {
            mismatches.append("wallet.credits (\(credits.count) rows) differs from the credit entries (\(creditEntries.count))")
        }
        let refusals = try Set(connection.query("""
            SELECT key FROM wallet.idempotency_keys WHERE outcome = 'insufficient_funds'
            """).map { try $0.decode(String.self, at: 0) })
        if refusals.subtracting(told.unresolved.map { String($0.dropFirst("debit ".count)) }) != told.refused {
            mismatches.append("\(refusals.count) refusals stored, \(told.refused.count) told")
        }

        // Every balance is acknowledged credits minus acknowledged debits.
        var expected: [String: Int64] = Dictionary(uniqueKeysWithValues: ChaosRun.users.map { ($0, 0) })
        for credit in told.credits.values { expected[credit.user, default: 0] += credit.amount }
        for debit in told.debits.values { expected[debit.user, default: 0] -= debit.amount }
        var balances: [String: Int64] = [:]
        for row in try connection.query("SELECT user_id, balance FROM wallet.wallets WHERE currency = 'coin'") {
            balances[try row.decode(String.self, at: 0)] = try row.decode(Int64.self, at: 1)
        }
        if told.unresolved.isEmpty {
            for user in Set(expected.keys).union(balances.keys).sorted()
            where balances[user, default: 0] != expected[user, default: 0] {
                mismatches.append("\(user): balance \(balances[user, default: 0]), acknowledged \(expected[user, default: 0])")
            }
        }
        return mismatches
    }

    /// Ledger entries of one kind by reference; more than one per reference is a double.
    private static func movements(kind: String, on connection: Connection) throws -> [String: [ChaosTally.Movement]] {
        var result: [String: [ChaosTally.Movement]] = [:]
        for row in try connection.query("""
            SELECT reference, user_id, abs(amount) FROM wallet.entries WHERE kind = \(kind) ORDER BY id
            """) {
            result[try row.decode(String.self, at: 0), default: []]
                .append(.init(user: try row.decode(String.self, at: 1), amount: try row.decode(Int64.self, at: 2)))
        }
        return result
    }

    private static func differences(_ kind: String, ledger: [String: [ChaosTally.Movement]],
                                    told: [String: ChaosTally.Movement], unresolved: Set<String>) -> [String] {
        var found: [String] = []
        for (reference, entries) in ledger.sorted(by: { $0.key < $1.key }) {
            if entries.count > 1 {
                found.append("\(kind) \(reference) is in the ledger \(entries.count) times")
            }
            if let movement = told[reference] {
                if entries[0] != movement {
                    found.append("\(kind) \(reference): ledger \(entries[0]), acknowledged \(movement)")
                }
            } else if !unresolved.contains("\(kind) \(reference)") {
                found.append("\(kind) \(reference) is in the ledger but was never acknowledged")
            }
        }
        for reference in told.keys.sorted() where ledger[reference] == nil {
            found.append("\(kind) \(reference) was acknowledged but is not in the ledger")
        }
        return found
    }
}

// MARK: - The report

public struct ChaosReport: Sendable {
    public var acknowledged: Int
    var credits: Int
    var debits: Int
    var refused: Int
    var duplicatesReplayed: Int
    var holdsPlaced: Int
    var holdsCaptured: Int
    var holdsReleased: Int
    var lostAnswersReplayed: Int
    var abandoned: Int
    var retries: ChaosTally.Retries
    public var outages: [ChaosTally.Outage]
    var trafficSeconds: Double
    public var problems: [String]
    public var mismatches: [String]
    public var checkStatus: Int32
    public var checkOutput: String
    public var stopStatus: Int32?

    init(state: ChaosTally.State, trafficSeconds: Double, mismatches: [String], checkStatus: Int32,
         checkOutput: String, stopStatus: Int32?) {
        acknowledged = state.acknowledged
        credits = state.credits.count
        debits = state.debits.count
        refused = state.refused.count
        duplicatesReplayed = state.duplicatesReplayed
        holdsPlaced = state.holdsPlaced
        holdsCaptured = state.debits.keys.filter { $0.hasPrefix("hold:") }.count
        holdsReleased = state.holdsReleased
        lostAnswersReplayed = state.lostAnswersReplayed
        abandoned = state.abandoned
        retries = state.retries
        outages = state.outages
        self.trafficSeconds = trafficSeconds
        problems = state.problems + (state.problemsDropped > 0 ? ["… and \(state.problemsDropped) more"] : [])
        self.mismatches = Array(mismatches.prefix(50)) + (mismatches.count > 50 ? ["… and \(mismatches.count - 50) more"] : [])
        self.checkStatus = checkStatus
        self.checkOutput = checkOutput
        self.stopStatus = stopStatus
    }

    public var summary: String {
        """
        chaos: \(acknowledged) operations acknowledged in \(String(format: "%.1f", trafficSeconds)) s \
        (\(credits) credits, \(debits) debits of which \(holdsCaptured) captured holds, \(refused) debits and holds \
        refused for insufficient funds; \(holdsPlaced) holds placed, \(holdsReleased) released; \
        \(duplicatesReplayed) duplicate credits replayed, \(abandoned) answers abandoned, \
        \(lostAnswersReplayed) lost answers replayed on retry); \
        \(retries.total) retries (\(retries.connection) connection errors, \(retries.timeouts) timeouts, \
        \(retries.unavailable) × 503, \(retries.otherServerErrors) other 5xx); \
        outages: \(outageSummary)
        """
    }

    /// One clause per kind of fault; a kind injected many times (the long
    /// run) is summarised by its median and worst window.
    private var outageSummary: String {
        var names: [String] = []
        for outage in outages where !names.contains(outage.name) { names.append(outage.name) }
        return names.map { name in
            let group = outages.filter { $0.name == name }
            let windows = group.compactMap(\.windowMilliseconds).sorted()
            let recoveries = group.compactMap(\.recoverySeconds).map { Int(($0 * 1000).rounded()) }.sorted()
            let recoveryName = name.hasPrefix("SIGKILL") ? "restart to ready" : "pg_ctl"
            let unseen = group.count - windows.count
            if group.count == 1, let only = group.first {
                let window = only.windowMilliseconds.map { "\($0) ms" }
                    ?? (only.firstFailure == nil ? "unnoticed" : "not recovered")
                return "\(name) \(window) (\(only.failedAttempts) failed attempts, \(only.inFlight) in flight, "
                    + "\(recoveryName) \(recoveries.first ?? 0) ms)"
            }
            return "\(name) ×\(group.count): window median \(median(windows)) ms, max \(windows.last ?? 0) ms"
                + " (\(recoveryName) median \(median(recoveries)) ms, max \(recoveries.last ?? 0) ms"
                + (unseen > 0 ? ", \(unseen) unnoticed or not recovered" : "") + ")"
        }.joined(separator: "; ")
    }

    private func median(_ sorted: [Int]) -> Int {
        sorted.isEmpty ? 0 : sorted[sorted.count / 2]
    }
}

private extension SplitMix64 {
    /// True with probability `percent` in 100.
    mutating func chance(_ percent: Int) -> Bool {
        below(100) < percent
    }
}
