import Foundation
import HTTPServer
import JSON
import Locking
import Postgres
import Synchronization
import Testing
import TestSupport
import ServiceTestSupport

/// A database that stops answering, a wallet someone holds locked, and a
/// write whose connection dies after it was sent: each is answered within
/// its time, with a code that says what the caller should do, through the
/// real `wallet` binary.
@Suite(.timeLimit(.minutes(3)))
struct StallTests {
    /// One answer as a client saw it.
    struct Observation: Sendable {
        var startedSeconds: Double
        var seconds: Double
        var status: Int
        var code: String?
    }

    /// The service, a debit key and coins for `users`, on `databaseURL`.
    static func serve(databaseURL: String, users: [String], extra: [String: String] = [:]) throws
        -> (server: ServerProcess, port: UInt16, key: String) {
        let key = try ChaosRun.walletCommand(["keys", "create", "--name", "game", "--scopes", "debit"],
                                             databaseURL: databaseURL).lastLine
        let connection = try Connection(options: .init(conninfo: databaseURL))
        defer { connection.close() }
        for user in users {
            try connection.query("SELECT * FROM wallet.grant_coins(\(user), 1000000, 'coin', 'setup', 'tests')")
        }
        var environment = ["WALLET_DATABASE_URL": databaseURL, "WALLET_LISTEN": "127.0.0.1:0",
                           "WALLET_CREDIT_VERIFICATION": "caller"]
        for (name, value) in extra { environment[name] = value }
        let server = try ServerProcess(binary: CommandLineTests.walletBinary,
                                       environment: ChaosRun.walletEnvironment(environment))
        let port = try server.waitForPort()
        guard waitFor(seconds: 30, { (try? get(port: port, path: "/readyz"))?.status == 200 }) else {
            server.kill()
            throw Failure(description: "wallet serve was not ready: \(server.output)")
        }
        return (server, port, key)
    }

    struct Failure: Error, CustomStringConvertible {
        var description: String
    }

    static func debit(port: UInt16, key: String, user: String, idempotencyKey: String,
                      timeoutSeconds: Double = 30) throws -> HTTPTestResponse {
        let client = try HTTPTestClient(port: port, timeoutSeconds: timeoutSeconds)
        defer { client.close() }
        return try client.request(
            method: "POST", path: "/v1/debits",
            headers: [("Authorization", "Bearer \(key)"), ("Content-Type", "application/json"),
                      ("Idempotency-Key", idempotencyKey)],
            body: Array(#"{"user_id":"\#(user)","amount":1}"#.utf8))
    }

    static func get(port: UInt16, path: String, timeoutSeconds: Double = 5) throws -> HTTPTestResponse {
        let client = try HTTPTestClient(port: port, timeoutSeconds: timeoutSeconds)
        defer { client.close() }
        return try client.request(method: "GET", path: path)
    }

    static func code(_ response: HTTPTestResponse) -> String? {
        let value: JSONValue? = (try? response.json())?["code"]
        guard case .string(let code)? = value else { return nil }
        return code
    }

    /// Polls `condition` every 20 ms until it holds or `seconds` pass.
    static func check(databaseURL: String) throws -> (status: Int32, output: String) {
        let result = try runProcess([CommandLineTests.walletBinary, "check", "--full"],
                                    environment: ChaosRun.walletEnvironment(["WALLET_DATABASE_URL": databaseURL]))
        return (result.status, result.output + result.error)
    }

    // MARK: Item 7: a frozen database

    /// The postmaster and every process it started.
    static func serverProcesses(of cluster: LocalCluster) throws -> [pid_t] {
        let pidFile = try String(contentsOfFile: cluster.dataDirectory + "/postmaster.pid", encoding: .utf8)
        guard let postmaster = pid_t(pidFile.split(separator: "\n").first ?? "") else {
            throw Failure(description: "no postmaster pid in \(pidFile)")
        }
        var processes = [postmaster]
        for entry in (try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? [] {
            guard let pid = pid_t(entry),
                  let stat = try? String(contentsOfFile: "/proc/\(entry)/stat", encoding: .utf8),
                  let close = stat.lastIndex(of: ")") else { continue }
            // After the command name: state, then the parent's pid.
            let fields = stat[stat.index(after: close)...].split(separator: " ")
            if fields.count > 1, pid_t(fields[1]) == postmaster { processes.append(pid) }
        }
        return processes
    }

    @Test func aFrozenDatabaseGets503sInTimeWhileHealthzStaysUp() throws {
        let requestTimeoutSeconds = 3.0
        let cluster = try TestCluster.start(name: "freeze")
        defer { TestCluster.destroy(cluster) }
        let databaseURL = try ChaosRun.migratedWalletDatabase(on: cluster)
        let users = (0..<8).map { "frozen-\($0)" }
        let (server, port, key) = try Self.serve(databaseURL: databaseURL, users: users,
                                                 extra: ["WALLET_REQUEST_TIMEOUT_SECONDS": "3"])
        defer { server.kill() }

        let frozen = Locked<[pid_t]>([])
        defer { for pid in frozen.withLock({ $0 }) { kill(pid, SIGCONT) } }
        let freezeStarted = Atomic<Int64>(-1)  // milliseconds on the test's clock, once frozen
        let stop = Atomic<Bool>(false)
        let observations = Locked<[Observation]>([])
        let health = Locked<[Observation]>([])
        let failures = Locked<[String]>([])
        let counter = Atomic<Int>(0)

        let loadDone = DispatchSemaphore(value: 0)
        let load = Thread {
            defer { loadDone.signal() }
            runOnThreads(5, timeoutSeconds: 90) { index in
                if index == 4 {
                    // One thread asks /healthz all along.
                    while !stop.load(ordering: .relaxed) {
                        let started = HTTPTestClient.now()
                        do {
                            let response = try Self.get(port: port, path: "/healthz", timeoutSeconds: 10)
                            health.withLock {
                                $0.append(Observation(startedSeconds: started, seconds: HTTPTestClient.now() - started,
                                                      status: response.status, code: nil))
                            }
                        } catch {
                            failures.withLock { $0.append("healthz: \(error)") }
                        }
                        // The prober's pace, ten a second: the load under test.
                        Thread.sleep(forTimeInterval: 0.1)
                    }
                    return
                }
                while !stop.load(ordering: .relaxed) {
                    let number = counter.add(1, ordering: .relaxed).newValue
                    let started = HTTPTestClient.now()
                    do {
                        let response = try Self.debit(port: port, key: key, user: users[number % users.count],
                                                      idempotencyKey: "freeze-\(number)", timeoutSeconds: 30)
                        observations.withLock {
                            $0.append(Observation(startedSeconds: started, seconds: HTTPTestClient.now() - started,
                                                  status: response.status, code: Self.code(response)))
                        }
                    } catch {
                        failures.withLock { $0.append("debit \(number): \(error)") }
                    }
                }
            }
        }
        load.start()

        // Traffic flows first.
        #expect(waitFor(seconds: 30) { observations.withLock { $0.filter { $0.status == 201 }.count } >= 20 })
        // Freeze: the postmaster first, so it starts nothing new, then the rest.
        let processes = try Self.serverProcesses(of: cluster)
        for pid in processes where kill(pid, SIGSTOP) == 0 { frozen.withLock { $0.append(pid) } }
        let frozeAt = HTTPTestClient.now()
        freezeStarted.store(Int64(frozeAt * 1_000), ordering: .relaxed)
        // Long enough for cached keys to expire and for several request timeouts.
        #expect(waitFor(seconds: 30) {
            observations.withLock { $0.filter { $0.startedSeconds > frozeAt + requestTimeoutSeconds + 2 }.count } >= 20
        })
        let thawAt = HTTPTestClient.now()
        for pid in frozen.withLock({ $0 }) { kill(pid, SIGCONT) }
        frozen.withLock { $0.removeAll() }

        // Recovery, by itself.
        let recovered = waitFor(seconds: 30) {
            observations.withLock { $0.contains { $0.startedSeconds > thawAt && $0.status == 201 } }
        }
        #expect(recovered, "no debit succeeded within 30 s of the database thawing")
        stop.store(true, ordering: .relaxed)
        #expect(loadDone.wait(timeout: .now() + 60) == .success)

        let all = observations.withLock { $0 }
        // While frozen: every request answered, 503, within the timeout and 2 s.
        let duringFreeze = all.filter { $0.startedSeconds >= frozeAt && $0.startedSeconds + $0.seconds <= thawAt }
        #expect(!duringFreeze.isEmpty)
        for observation in duringFreeze {
            #expect(observation.status == 503, "a request during the freeze got \(observation.status)")
            #expect(observation.seconds <= requestTimeoutSeconds + 2,
                    "a request during the freeze took \(observation.seconds) s")
        }
        for observation in all where observation.status != 201 {
            #expect(observation.status == 503 && ["database_unavailable", "outcome_unknown"].contains(observation.code ?? ""),
                    "unexpected answer \(observation.status) \(observation.code ?? "-")")
        }
        let healthChecks = health.withLock { $0 }
        #expect(healthChecks.allSatisfy { $0.status == 200 })
        #expect(healthChecks.filter { $0.startedSeconds > frozeAt && $0.startedSeconds < thawAt }.count >= 10)
        #expect(failures.withLock { $0 }.isEmpty, "\(failures.withLock { $0.prefix(5) })")

        let latencies = duringFreeze.map(\.seconds).sorted()
        let healthLatencies = healthChecks.filter { $0.startedSeconds > frozeAt && $0.startedSeconds < thawAt }
            .map(\.seconds).sorted()
        print(String(format: "frozen database: %d debits answered 503, median %.2f s, max %.2f s; /healthz max %.2f s",
                     latencies.count, latencies[latencies.count / 2], latencies.last ?? 0, healthLatencies.last ?? 0))

        server.signal(SIGTERM)
        #expect(server.waitForExit(seconds: 30) == 0)
        let check = try Self.check(databaseURL: databaseURL)
        #expect(check.status == 0, "\(check.output)")
    }

    // MARK: Item 8: a locked wallet

    @Test func aLockedWalletIsAnsweredBusyWhileOthersCommit() throws {
        let options = try TestDatabase.make()
        let databaseURL = TestService.conninfo(options)
        let others = (0..<50).map { "other-\($0)" }
        let (server, port, key) = try Self.serve(databaseURL: databaseURL, users: others + ["locked"])
        defer { server.kill() }

        // An operator's open transaction holds one wallet.
        let operatorSession = try Connection(options: options)
        try operatorSession.execute("BEGIN")
        try operatorSession.query("SELECT balance FROM wallet.wallets WHERE user_id = 'locked' AND currency = 'coin' FOR UPDATE")
        let watcher = try Connection(options: options)
        let lockedAnswer = Locked<HTTPTestResponse?>(nil)
        let lockedThread = Thread {
            let response = try? Self.debit(port: port, key: key, user: "locked", idempotencyKey: "locked-1")
            lockedAnswer.withLock { $0 = response }
        }
        lockedThread.start()
        // The writer waits on the row lock.
        #expect(waitFor(seconds: 30) {
            ((try? watcher.query("SELECT count(*) FROM pg_locks WHERE NOT granted")[0].decode(Int.self, at: 0)) ?? 0) > 0
        })

        let started = HTTPTestClient.now()
        let statuses = Locked<[String: Int]>([:])
        let finished = runOnThreads(10, timeoutSeconds: 60) { thread in
            for index in stride(from: thread, to: others.count, by: 10) {
                let status = (try? Self.debit(port: port, key: key, user: others[index], idempotencyKey: "other-\(index)"))?.status
                statuses.withLock { $0[others[index]] = status ?? -1 }
            }
        }
        let seconds = HTTPTestClient.now() - started
        #expect(finished)
        #expect(statuses.withLock { $0 }.count == others.count)
        #expect(statuses.withLock { $0 }.values.allSatisfy { $0 == 201 }, "\(statuses.withLock { $0 })")
        #expect(seconds < 30)

        #expect(waitFor(seconds: 30) { lockedAnswer.withLock { $0 } != nil })
        let busy = try #require(lockedAnswer.withLock { $0 })
        #expect(busy.status == 503)
        #expect(Self.code(busy) == "wallet_busy")
        #expect(busy.header("Retry-After") != nil)
        // Nothing was written under the key.
        #expect(try watcher.query("SELECT count(*) FROM wallet.idempotency_keys WHERE key = 'locked-1'")[0]
            .decode(Int.self, at: 0) == 0)

        try operatorSession.execute("COMMIT")
        let retry = try Self.debit(port: port, key: key, user: "locked", idempotencyKey: "locked-1")
        #expect(retry.status == 201)
        print(String(format: "locked wallet: 50 other debits all 201 in %.2f s", seconds))
        let check = try Self.check(databaseURL: databaseURL)
        #expect(check.status == 0, "\(check.output)")
    }

    // MARK: Item 9: an outcome that is not known

    /// A debit waiting on a wallet an operator holds, as a client sees it.
    struct HeldWallet {
        var server: ServerProcess
        var port: UInt16
        var key: String
        var holder: Connection
        var watcher: Connection
        var answer: Locked<HTTPTestResponse?>
        var databaseURL: String
    }

    /// Holds the wallet `held` in a transaction, sends a debit that waits
    /// for it, and returns once the debit's backend waits on the lock, with
    /// that backend's pid.
    static func debitWaitingOnAHeldWallet(requestTimeoutSeconds: Int) throws -> (HeldWallet, backend: Int) {
        let options = try TestDatabase.make()
        let databaseURL = TestService.conninfo(options)
        let (server, port, key) = try Self.serve(databaseURL: databaseURL, users: ["held"],
                                                 extra: ["WALLET_LOCK_TIMEOUT_MILLISECONDS": "30000",
                                                         "WALLET_REQUEST_TIMEOUT_SECONDS": String(requestTimeoutSeconds)])
        let holder = try Connection(options: options)
        try holder.execute("BEGIN")
        try holder.query("SELECT balance FROM wallet.wallets WHERE user_id = 'held' FOR UPDATE")
        let answer = Locked<HTTPTestResponse?>(nil)
        let thread = Thread {
            let response = try? Self.debit(port: port, key: key, user: "held", idempotencyKey: "held-1", timeoutSeconds: 60)
            answer.withLock { $0 = response }
        }
        thread.start()
        let watcher = try Connection(options: options)
        var waitingBackend: Int?
        _ = waitFor(seconds: 30) {
            waitingBackend = try? watcher.query("""
                SELECT l.pid FROM pg_locks l JOIN pg_stat_activity a USING (pid)
                WHERE NOT l.granted AND a.application_name = 'wallet' LIMIT 1
                """).single?.decode(Int.self, at: 0)
            return waitingBackend != nil
        }
        let held = HeldWallet(server: server, port: port, key: key, holder: holder, watcher: watcher, answer: answer,
                              databaseURL: databaseURL)
        guard let backend = waitingBackend else {
            server.kill()
            throw Failure(description: "the debit never waited on the lock")
        }
        return (held, backend)
    }

    /// The deadline passes while the statement waits in the database: it
    /// was sent, so it may yet commit. 503 `outcome_unknown`; the retry
    /// applies it once (it had not committed), and the next one replays.
    @Test func aWriteWhoseDeadlinePassesAfterSendingIsOutcomeUnknownAndItsRetryApplies() throws {
        let (held, _) = try Self.debitWaitingOnAHeldWallet(requestTimeoutSeconds: 3)
        defer { held.server.kill() }
        #expect(waitFor(seconds: 30) { held.answer.withLock { $0 } != nil })
        let unknown = try #require(held.answer.withLock { $0 })
        #expect(unknown.status == 503)
        #expect(Self.code(unknown) == "outcome_unknown")
        #expect(unknown.header("Retry-After") != nil)

        // The statement's timeout is a second longer than the client's
        // deadline: the statement is still waiting for a moment after the
        // answer. Its own timeout ends it.
        #expect(waitFor(seconds: 30) {
            (try? held.watcher.query("""
                SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a USING (pid)
                WHERE NOT l.granted AND a.application_name = 'wallet'
                """)[0].decode(Int.self, at: 0)) == 0
        }, "the debit's statement outlived its timeout")
        try held.holder.execute("COMMIT")
        // The retry with the same key applies it (it had not committed) ...
        let retry = try Self.debit(port: held.port, key: held.key, user: "held", idempotencyKey: "held-1")
        #expect(retry.status == 201)
        #expect(retry.header("Idempotent-Replayed") == nil)
        // ... and a second one replays it.
        let again = try Self.debit(port: held.port, key: held.key, user: "held", idempotencyKey: "held-1")
        #expect(again.status == 201)
        #expect(again.header("Idempotent-Replayed") == "true")
        #expect(try held.watcher.query("SELECT balance FROM wallet.wallets WHERE user_id = 'held'")[0]
            .decode(Int64.self, at: 0) == 999_999)
        let check = try Self.check(databaseURL: held.databaseURL)
        #expect(check.status == 0, "\(check.output)")
    }

    /// The server ends the session while the statement waits (57P01, as
    /// in a switchover or a fast shutdown): its error came before the
    /// statement completed, so nothing committed, and the service runs it
    /// again within the request's deadline. The client sees one 201.
    @Test func aSessionTheServerEndsBeforeTheWriteRanIsRetriedWithinTheDeadline() throws {
        let (held, backend) = try Self.debitWaitingOnAHeldWallet(requestTimeoutSeconds: 30)
        defer { held.server.kill() }
        try held.watcher.query("SELECT pg_terminate_backend(\(backend))")
        // The retry waits on the lock again; the client has no answer yet.
        #expect(TestDatabase.waitForLockWaiters(1, on: held.watcher))
        #expect(held.answer.withLock { $0 } == nil)
        try held.holder.execute("COMMIT")
        #expect(waitFor(seconds: 30) { held.answer.withLock { $0 } != nil })
        let answer = try #require(held.answer.withLock { $0 })
        #expect(answer.status == 201)
        #expect(answer.header("Idempotent-Replayed") == nil)
        #expect(try held.watcher.query("SELECT balance FROM wallet.wallets WHERE user_id = 'held'")[0]
            .decode(Int64.self, at: 0) == 999_999)
        let metrics = try Self.get(port: held.port, path: "/metrics")
        #expect(String(decoding: metrics.body, as: UTF8.self).contains(#"wallet_db_errors_total{kind="unavailable"}"#))
        let check = try Self.check(databaseURL: held.databaseURL)
        #expect(check.status == 0, "\(check.output)")
    }

    @Test func aLockTimeoutOutsideItsRangeStopsStartUp() throws {
        for value in ["0", "60001", "soon"] {
            let result = try runProcess([CommandLineTests.walletBinary, "serve"], environment: ChaosRun.walletEnvironment([
                "WALLET_DATABASE_URL": "host=/nonexistent", "WALLET_CREDIT_VERIFICATION": "caller",
                "WALLET_LOCK_TIMEOUT_MILLISECONDS": value,
            ]))
            #expect(result.status == 2, "\(value)")
            #expect(result.error.contains("WALLET_LOCK_TIMEOUT_MILLISECONDS"), "\(value): \(result.error)")
        }
    }
}
