import Foundation
import HTTPServer
import JSON
import Locking
import Postgres
import Testing
import TestSupport
import ServiceTestSupport

/// Several `wallet serve` processes on one database. Inside an instance,
/// group commit gives a wallet one writer; across instances nothing is
/// shared but PostgreSQL, whose row locks and unique constraints must keep
/// every credit and every debit exactly once.
@Suite(.timeLimit(.minutes(5)))
struct MultiInstanceTests {
    static let instances = 3
    static let threadsPerInstance = 32
    static let rounds = 3

    struct Failure: Error, CustomStringConvertible {
        var description: String
    }

    /// One answer, after the client's own retries of 503s.
    struct Answer: Sendable {
        var status: Int
        var replayed: Bool
        var body: String
        var code: String?
    }

    static func startInstances(databaseURL: String) throws -> [(server: ServerProcess, port: UInt16)] {
        var started: [(server: ServerProcess, port: UInt16)] = []
        do {
            for _ in 0..<instances {
                let server = try ServerProcess(binary: CommandLineTests.walletBinary, environment: ChaosRun.walletEnvironment([
                    "WALLET_DATABASE_URL": databaseURL, "WALLET_LISTEN": "127.0.0.1:0",
                    "WALLET_CREDIT_VERIFICATION": "caller",
                ]))
                started.append((server, try server.waitForPort()))
            }
            for (server, port) in started {
                guard waitFor(seconds: 30, { (try? StallTests.get(port: port, path: "/readyz"))?.status == 200 }) else {
                    throw Failure(description: "an instance was not ready: \(server.output)")
                }
            }
        } catch {
            for (server, _) in started { server.kill() }
            throw error
        }
        return started
    }

    /// A request as a careful client sends it: a 503 is retried (same body,
    /// same key) after a short pause, up to 20 times.
    static func send(port: UInt16, path: String, key: String, json: String, idempotencyKey: String?,
                     retries: Locked<Int>) -> Answer {
        var lastError = ""
        for _ in 0..<20 {
            let headers = idempotencyKey.map { [(name: "Idempotency-Key", value: $0)] } ?? []
            do {
                let response = try TestService.request(port: port, "POST", path, key: key, json: json, headers: headers)
                let answer = Answer(status: response.status, replayed: response.header("Idempotent-Replayed") == "true",
                                    body: String(decoding: response.body, as: UTF8.self), code: StallTests.code(response))
                guard answer.status == 503 else { return answer }
                lastError = answer.body
            } catch {
                lastError = "\(error)"
            }
            retries.withLock { $0 += 1 }
            // The careful client's pause before it retries: its behaviour,
            // not a wait for the service (the next answer is what it waits for).
            Thread.sleep(forTimeInterval: 0.05)
        }
        return Answer(status: 0, replayed: false, body: lastError, code: nil)
    }

    @Test func oneFlowNoAndOneKeyRacedOnThreeInstancesApplyOnce() throws {
        let cluster = try TestCluster.start(name: "multi")
        defer { TestCluster.destroy(cluster) }
        let databaseURL = try ChaosRun.migratedWalletDatabase(on: cluster)
        let creditKey = try ChaosRun.walletCommand(["keys", "create", "--name", "shop", "--scopes", "credit"],
                                                   databaseURL: databaseURL).lastLine
        let debitKey = try ChaosRun.walletCommand(["keys", "create", "--name", "game", "--scopes", "debit"],
                                                  databaseURL: databaseURL).lastLine
        let admin = try Connection(options: .init(conninfo: databaseURL))
        defer { admin.close() }
        try admin.query("SELECT * FROM wallet.grant_coins('spender', 1000, 'coin', 'setup', 'tests')")
        try admin.query("SELECT * FROM wallet.grant_coins('drained', 500, 'coin', 'setup', 'tests')")

        let instances = try Self.startInstances(databaseURL: databaseURL)
        defer { for (server, _) in instances { server.kill() } }
        let ports = instances.map(\.port)
        let threads = Self.instances * Self.threadsPerInstance
        let retries = Locked<Int>(0)

        for round in 0..<Self.rounds {
            let flowNo = "multi-flow-\(round)"
            let key = "multi-key-\(round)"
            let credits = Locked<[Answer]>([])
            let debits = Locked<[Answer]>([])
            let drains = Locked<[Answer]>([])
            // Thread i talks to instance i mod 3: the same flowNO and key
            // reach every instance at once.
            let finished = runOnThreads(threads, timeoutSeconds: 120) { index in
                let port = ports[index % ports.count]
                let credit = Self.send(port: port, path: "/v1/credits", key: creditKey,
                                       json: #"{"user_id":"buyer","flow_no":"\#(flowNo)","product_id":"guodong600"}"#,
                                       idempotencyKey: String?.none, retries: retries)
                let debit = Self.send(port: port, path: "/v1/debits", key: debitKey,
                                      json: #"{"user_id":"spender","amount":100,"reason":"raced"}"#,
                                      idempotencyKey: key, retries: retries)
                let drain = Self.send(port: port, path: "/v1/debits", key: debitKey,
                                      json: #"{"user_id":"drained","amount":10}"#,
                                      idempotencyKey: "drain-\(round)-\(index)", retries: retries)
                credits.withLock { $0.append(credit) }
                debits.withLock { $0.append(debit) }
                drains.withLock { $0.append(drain) }
            }
            #expect(finished)

            let creditAnswers = credits.withLock { $0 }
            #expect(creditAnswers.count == threads)
            #expect(creditAnswers.filter { $0.status == 201 && !$0.replayed }.count == 1,
                    "\(creditAnswers.map { "\($0.status) \($0.code ?? "")" })")
            #expect(creditAnswers.allSatisfy { ($0.status == 201 && !$0.replayed) || ($0.status == 200 && $0.replayed) })
            // Every answer names the one credit.
            let creditIDs = Set(creditAnswers.compactMap { (try? JSONParser.parse(Array($0.body.utf8)))?["credit"]?["entry_id"].map { "\($0)" } })
            #expect(creditIDs.count == 1)

            let debitAnswers = debits.withLock { $0 }
            #expect(debitAnswers.allSatisfy { $0.status == 201 }, "\(debitAnswers.map { "\($0.status) \($0.code ?? "")" })")
            #expect(debitAnswers.filter { !$0.replayed }.count == 1)
            // A replay is the first answer, byte for byte.
            #expect(Set(debitAnswers.map(\.body)).count == 1)

            let drainAnswers = drains.withLock { $0 }
            #expect(drainAnswers.allSatisfy { $0.status == 201 || ($0.status == 409 && $0.code == "insufficient_funds") },
                    "\(drainAnswers.map { "\($0.status) \($0.code ?? "")" })")
        }

        func number(_ sql: PostgresQuery) throws -> Int { try admin.query(sql)[0].decode(Int.self, at: 0) }
        #expect(try number("SELECT balance FROM wallet.wallets WHERE user_id = 'buyer'") == 600 * Self.rounds)
        #expect(try number("SELECT count(*) FROM wallet.credits WHERE flow_no LIKE 'multi-flow-%'") == Self.rounds)
        #expect(try number("SELECT balance FROM wallet.wallets WHERE user_id = 'spender'") == 1_000 - 100 * Self.rounds)
        // 500 coins in debits of 10: exactly fifty of all the attempts, and
        // the balance never below zero.
        #expect(try number("SELECT balance FROM wallet.wallets WHERE user_id = 'drained'") == 0)
        #expect(try number("SELECT count(*) FROM wallet.entries WHERE user_id = 'drained' AND amount = -10") == 50)
        let check = try StallTests.check(databaseURL: databaseURL)
        #expect(check.status == 0, "\(check.output)")
        // How hard the instances contended, for whoever reads the log.
        print("multi-instance race: \(retries.withLock { $0 }) client retries of 503 answers")
    }

    /// Hold operations keep their keys the way debits do, by the key's
    /// primary key and a retry alone, with no lock of their own: one key
    /// raced on three instances places one hold, and captures it once, and
    /// every answer is the first one's bytes.
    @Test func oneHoldKeyAndOneCaptureKeyRacedOnThreeInstancesApplyOnce() throws {
        let cluster = try TestCluster.start(name: "multi-hold")
        defer { TestCluster.destroy(cluster) }
        let databaseURL = try ChaosRun.migratedWalletDatabase(on: cluster)
        let debitKey = try ChaosRun.walletCommand(["keys", "create", "--name", "game", "--scopes", "debit"],
                                                  databaseURL: databaseURL).lastLine
        let admin = try Connection(options: .init(conninfo: databaseURL))
        defer { admin.close() }
        try admin.query("SELECT * FROM wallet.grant_coins('holder', 1000, 'coin', 'setup', 'tests')")

        let instances = try Self.startInstances(databaseURL: databaseURL)
        defer { for (server, _) in instances { server.kill() } }
        let ports = instances.map(\.port)
        let threads = Self.instances * Self.threadsPerInstance
        let retries = Locked<Int>(0)

        for round in 0..<Self.rounds {
            let placed = Locked<[Answer]>([])
            #expect(runOnThreads(threads, timeoutSeconds: 120) { index in
                let answer = Self.send(port: ports[index % ports.count], path: "/v1/holds", key: debitKey,
                                       json: #"{"user_id":"holder","amount":100,"reason":"raced"}"#,
                                       idempotencyKey: "multi-hold-\(round)", retries: retries)
                placed.withLock { $0.append(answer) }
            })
            let placeAnswers = placed.withLock { $0 }
            #expect(placeAnswers.allSatisfy { $0.status == 201 }, "\(placeAnswers.map { "\($0.status) \($0.code ?? "")" })")
            #expect(placeAnswers.filter { !$0.replayed }.count == 1)
            #expect(Set(placeAnswers.map(\.body)).count == 1)
            guard case .number(let hold)? = try JSONParser.parse(Array(placeAnswers[0].body.utf8))["hold"]?["id"] else {
                throw Failure(description: "no hold id in \(placeAnswers[0].body)")
            }

            let captured = Locked<[Answer]>([])
            #expect(runOnThreads(threads, timeoutSeconds: 120) { index in
                let answer = Self.send(port: ports[index % ports.count], path: "/v1/holds/\(hold)/capture", key: debitKey,
                                       json: "{}", idempotencyKey: "multi-capture-\(round)", retries: retries)
                captured.withLock { $0.append(answer) }
            })
            let captureAnswers = captured.withLock { $0 }
            #expect(captureAnswers.allSatisfy { $0.status == 201 }, "\(captureAnswers.map { "\($0.status) \($0.code ?? "")" })")
            #expect(captureAnswers.filter { !$0.replayed }.count == 1)
            #expect(Set(captureAnswers.map(\.body)).count == 1)
        }

        func number(_ sql: PostgresQuery) throws -> Int { try admin.query(sql)[0].decode(Int.self, at: 0) }
        #expect(try number("SELECT count(*) FROM wallet.holds WHERE user_id = 'holder'") == Self.rounds)
        #expect(try number("SELECT count(*) FROM wallet.holds WHERE user_id = 'holder' AND status = 'captured'") == Self.rounds)
        #expect(try number("SELECT balance FROM wallet.wallets WHERE user_id = 'holder'") == 1_000 - 100 * Self.rounds)
        #expect(try number("SELECT held FROM wallet.wallets WHERE user_id = 'holder'") == 0)
        let check = try StallTests.check(databaseURL: databaseURL)
        #expect(check.status == 0, "\(check.output)")
        // How often a key was taken by another instance first (its
        // insert failed on idempotency_keys_pkey and the operation ran
        // again alone), for whoever reads the log.
        let conflicts = ports.map { port -> String in
            let metrics = (try? StallTests.get(port: port, path: "/metrics"))?.text ?? ""
            return metrics.split(separator: "\n").first { $0.hasPrefix(#"wallet_db_errors_total{kind="sqlstate_23505"}"#) }
                .map(String.init) ?? "none"
        }
        print("multi-instance hold race: \(retries.withLock { $0 }) client retries of 503 answers; \(conflicts)")
    }
}
