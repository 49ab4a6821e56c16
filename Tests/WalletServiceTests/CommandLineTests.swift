import Foundation
import Postgres
import Testing
import TestSupport
import WalletService
import ServiceTestSupport

/// The `wallet` binary, as operators run it.
@Suite(.timeLimit(.minutes(3)))
struct CommandLineTests {
    /// The built `wallet` executable, beside the test bundle.
    static let walletBinary = ServerProcess.walletBinary

    func environment(_ extra: [String: String]) -> [String: String] {
        var environment = ProcessInfo.processInfo.environment.filter { !$0.key.hasPrefix("WALLET_") }
        environment["WALLET_LOG_LEVEL"] = "error"
        for (key, value) in extra { environment[key] = value }
        return environment
    }

    func wallet(_ arguments: [String], _ extra: [String: String] = [:], stdin: String? = nil) throws
        -> (status: Int32, output: String, error: String) {
        try runProcess([Self.walletBinary] + arguments, environment: environment(extra), stdin: stdin)
    }

    @Test func versionAndHelp() throws {
        let version = try wallet(["version"])
        #expect(version.status == 0)
        #expect(version.output.hasPrefix("wallet "))
        for command in ["serve", "migrate", "keys", "check", "doctor", "psql"] {
            let help = try wallet([command, "--help"])
            #expect(help.status == 0, "\(command) --help")
            #expect(help.output.contains("usage: wallet \(command)"), "\(command) --help")
        }
        let unknown = try wallet(["frobnicate"])
        #expect(unknown.status == 2)
    }

    @Test func aMalformedSettingStopsStartUpNamingTheVariable() throws {
        for (name, value) in [("WALLET_DB_POOL_SIZE", "many"), ("WALLET_LISTEN", "nowhere"), ("WALLET_LOG_LEVEL", "loud"),
                              ("WALLET_CREDIT_VERIFICATION", "trust-me"), ("WALLET_IDEMPOTENCY_RETENTION_HOURS", "23"),
                              ("WALLET_HTTP_THREADS", "257"), ("WALLET_MAX_CONNECTIONS", "3"),
                              ("WALLET_MAX_CONNECTIONS_PER_IP", "0"), ("WALLET_MAX_CONNECTIONS_PER_IP", "1025")] {
            let result = try wallet(["serve"], ["WALLET_DATABASE_URL": "host=/nonexistent", name: value])
            #expect(result.status == 2, "\(name)")
            #expect(result.error.contains(name), "\(name): \(result.error)")
        }
        let noBundle = try wallet(["serve"], ["WALLET_DATABASE_URL": "host=/nonexistent"])
        #expect(noBundle.status == 2)
        #expect(noBundle.error.contains("WALLET_APPLE_BUNDLE_ID"))
    }

    /// Without the app's Apple ID every Production notification is refused,
    /// so a refunded purchase would keep its coins: the service does not start.
    @Test func productionNotificationsNeedTheAppAppleID() throws {
        let database = ["WALLET_DATABASE_URL": "host=/nonexistent", "WALLET_APPLE_BUNDLE_ID": "com.example.game"]
        for modes in ["appstore-jws", "appstore-receipt", "caller,appstore-jws"] {
            for environments in ["Production", "Sandbox,Production"] {
                let refused = try wallet(["serve"], database.merging([
                    "WALLET_CREDIT_VERIFICATION": modes, "WALLET_APPLE_ENVIRONMENTS": environments,
                ]) { $1 })
                #expect(refused.status == 2, "\(modes) \(environments)")
                let lines = refused.error.split(separator: "\n")
                #expect(lines.count == 1, "\(refused.error)")
                #expect(lines.first?.contains("WALLET_APPLE_APP_APPLE_ID") == true, "\(refused.error)")
            }
        }
        // The rule is the one `serve` applies; Sandbox alone, the caller
        // mode alone, or an Apple ID given, pass it.
        let accepted: [[String: String]] = [
            ["WALLET_CREDIT_VERIFICATION": "appstore-jws", "WALLET_APPLE_ENVIRONMENTS": "Sandbox"],
            ["WALLET_CREDIT_VERIFICATION": "caller"],
            ["WALLET_CREDIT_VERIFICATION": "appstore-jws", "WALLET_APPLE_APP_APPLE_ID": "1234567890"],
        ]
        for extra in accepted {
            let configuration = try Configuration.load(environment: database.merging(extra) { $1 })
            #expect(throws: Never.self, "\(extra)") { try configuration.validateForServing() }
        }
    }

    @Test func migrateTwiceIsANoOp() throws {
        let url = TestService.conninfo(try TestDatabase.makeEmpty())
        let first = try wallet(["migrate"], ["WALLET_DATABASE_URL": url])
        #expect(first.status == 0, "\(first.error)")
        #expect(first.output.contains("applied: 0001_wallet_schema.sql"))
        let second = try wallet(["migrate", "--database-url", url])
        #expect(second.status == 0)
        #expect(second.output.contains("up to date"))
    }

    @Test func keysCreateListAndRevoke() throws {
        let url = TestService.conninfo(try TestDatabase.make())
        let created = try wallet(["keys", "create", "--name", "shop", "--scopes", "credit,read"], ["WALLET_DATABASE_URL": url])
        #expect(created.status == 0, "\(created.error)")
        let lines = created.output.split(separator: "\n", omittingEmptySubsequences: false).filter { !$0.isEmpty }
        let secret = String(lines.last ?? "")
        #expect(secret.hasPrefix("wk_") && !secret.contains(" "))
        let listed = try wallet(["keys", "list"], ["WALLET_DATABASE_URL": url])
        #expect(listed.status == 0)
        #expect(listed.output.contains("shop"))
        #expect(listed.output.contains("credit,read"))
        #expect(!listed.output.contains(secret))
        #expect(!listed.output.contains(String(secret.dropFirst(3))))
        let duplicate = try wallet(["keys", "create", "--name", "shop", "--scopes", "read"], ["WALLET_DATABASE_URL": url])
        #expect(duplicate.status == 1)
        let badScope = try wallet(["keys", "create", "--name", "x", "--scopes", "mint"], ["WALLET_DATABASE_URL": url])
        #expect(badScope.status != 0)
        #expect(try wallet(["keys", "revoke", "shop"], ["WALLET_DATABASE_URL": url]).status == 0)
        let after = try wallet(["keys", "list"], ["WALLET_DATABASE_URL": url])
        #expect(after.output.split(separator: "\n").contains { $0.hasPrefix("shop") && !$0.hasSuffix("-") })
        #expect(try wallet(["keys", "revoke", "shop"], ["WALLET_DATABASE_URL": url]).status == 1)
    }

    @Test func webhooksAddListDisableAndEnable() throws {
        let options = try TestDatabase.make()
        let url = TestService.conninfo(options)
        let secretFile = FileManager.default.temporaryDirectory.appendingPathComponent("webhook-secret-\(UUID().uuidString)")
        try Data("0123456789abcdef0123456789abcdef\n".utf8).write(to: secretFile)
        defer { try? FileManager.default.removeItem(at: secretFile) }
        let environment = ["WALLET_DATABASE_URL": url, "USER": "alice"]
        let added = try wallet(["webhooks", "add", "--url", "https://game.example/hooks", "--events",
                                "credit.refunded,balance.negative", "--secret-file", secretFile.path], environment)
        #expect(added.status == 0, "\(added.error)")
        #expect(added.output.split(separator: "\n").last == "id=1", "\(added.output)")
        let listed = try wallet(["webhooks", "list"], environment)
        #expect(listed.output.contains("1\tenabled\t0\t0s\tcredit.refunded,balance.negative\thttps://game.example/hooks"),
                "\(listed.output)")
        #expect(try wallet(["webhooks", "disable", "1"], environment).output.contains("is now disabled"))
        #expect(try wallet(["webhooks", "list"], environment).output.contains("1\tdisabled: disabled by alice"))
        #expect(try wallet(["webhooks", "enable", "1"], environment).output.contains("is now enabled"))
        // Refused: http:// without WALLET_WEBHOOKS_ALLOW_HTTP, an unknown
        // type, a short secret, an unknown endpoint.
        let http = try wallet(["webhooks", "add", "--url", "http://127.0.0.1:9/x", "--events", "*", "--secret-file",
                               secretFile.path], environment)
        #expect(http.status == 2 && http.error.contains("https://"), "\(http.error)")
        let allowed = try wallet(["webhooks", "add", "--url", "http://127.0.0.1:9/x", "--events", "*", "--secret-file",
                                  secretFile.path], environment.merging(["WALLET_WEBHOOKS_ALLOW_HTTP": "true"]) { $1 })
        #expect(allowed.output.split(separator: "\n").last == "id=2", "\(allowed.error)")
        let unknown = try wallet(["webhooks", "add", "--url", "https://game.example/x", "--events", "credit.made",
                                  "--secret-file", secretFile.path], environment)
        #expect(unknown.status == 2 && unknown.error.contains("unknown event type"), "\(unknown.error)")
        try Data("short".utf8).write(to: secretFile)
        let short = try wallet(["webhooks", "add", "--url", "https://game.example/x", "--events", "*", "--secret-file",
                                secretFile.path], environment)
        #expect(short.status == 2 && short.error.contains("16 to 4096 bytes"), "\(short.error)")
        #expect(try wallet(["webhooks", "disable", "9"], environment).status == 1)
        let connection = try Connection(options: options)
        defer { connection.close() }
        let audit = try connection.query("SELECT action || ' ' || operator FROM wallet.admin_audit ORDER BY id").map { $0[0] ?? "" }
        #expect(audit == ["webhook_add alice", "webhook_disable alice", "webhook_enable alice", "webhook_add alice"])
    }

    /// A support agent's key: `--scopes console`, which the database's
    /// check on scopes accepts.
    @Test func keysCreateMakesAConsoleKey() throws {
        let url = TestService.conninfo(try TestDatabase.make())
        let created = try wallet(["keys", "create", "--name", "alice-support", "--scopes", "console"],
                                 ["WALLET_DATABASE_URL": url])
        #expect(created.status == 0, "\(created.error)")
        #expect(created.output.split(separator: "\n").last?.hasPrefix("wk_") == true)
        let listed = try wallet(["keys", "list"], ["WALLET_DATABASE_URL": url])
        #expect(listed.output.split(separator: "\n").contains { $0.hasPrefix("alice-support") && $0.contains("console") },
                "\(listed.output)")
        let unknown = try wallet(["keys", "create", "--name", "x", "--scopes", "support"], ["WALLET_DATABASE_URL": url])
        #expect(unknown.status != 0)
        #expect(unknown.error.contains("scopes are credit, debit, grant, read, events, console, admin"), "\(unknown.error)")
    }

    @Test func checkAgreesWithTheAdminScript() throws {
        let options = try TestDatabase.make()
        let url = TestService.conninfo(options)
        let connection = try Connection(options: options)
        try connection.query("SELECT * FROM wallet.grant_coins('alice', 500, 'coin', 'setup', 'tests')")
        let clean = try wallet(["check"], ["WALLET_DATABASE_URL": url])
        #expect(clean.status == 0)
        let script = try runProcess(["psql", "-X", url, "-v", "ON_ERROR_STOP=1", "-f", "Scripts/admin/check.sql"])
        #expect(script.status == 0)

        // Corrupt a balance behind the triggers' back.
        try connection.execute("SET session_replication_role = replica")
        try connection.execute("UPDATE wallet.wallets SET balance = balance + 1 WHERE user_id = 'alice'")
        try connection.execute("INSERT INTO wallet.wallets (user_id, currency, balance) VALUES ('ghost', 'coin', 7)")
        // No entry tells of these changes, so only the full check sees them.
        let incremental = try wallet(["check"], ["WALLET_DATABASE_URL": url])
        #expect(incremental.status == 0, "\(incremental.output)")
        let corrupt = try wallet(["check", "--full"], ["WALLET_DATABASE_URL": url])
        #expect(corrupt.status == 1)
        let failing = try runProcess(["psql", "-X", url, "-v", "ON_ERROR_STOP=1", "-f", "Scripts/admin/check.sql"])
        #expect(failing.status != 0)
        // The same violations, by invariant and subject.
        let fromCLI = Set(corrupt.output.split(separator: "\n").map { $0.split(separator: "\t").prefix(2).joined(separator: " ") })
        #expect(fromCLI == ["balance_matches_ledger alice/coin", "balance_matches_ledger ghost/coin",
                            "events_end_at_wallet alice/coin", "lots_hold_balance alice/coin",
                            "lots_hold_balance ghost/coin"])
        for violation in fromCLI {
            let parts = violation.split(separator: " ")
            #expect(failing.output.contains(parts[0]) && failing.output.contains(parts[1]), "check.sql lacks \(violation)")
        }
    }

    @Test func serveFinishesARequestInFlightOnSIGTERMAndExitsZero() throws {
        let options = try TestDatabase.make()
        let url = TestService.conninfo(options)
        // A key to debit with, and coins to spend.
        let created = try wallet(["keys", "create", "--name", "game", "--scopes", "debit"], ["WALLET_DATABASE_URL": url])
        let key = String(created.output.split(separator: "\n").last ?? "")
        let connection = try Connection(options: options)
        try connection.query("SELECT * FROM wallet.grant_coins('alice', 100, 'coin', 'setup', 'tests')")

        let server = try ServerProcess(binary: Self.walletBinary,
                                       environment: environment(["WALLET_DATABASE_URL": url, "WALLET_LISTEN": "127.0.0.1:0",
                                                                 "WALLET_CREDIT_VERIFICATION": "caller"]))
        defer { server.kill() }
        let port = try server.waitForPort()
        #expect(try waitForReady(port: port))

        // Hold the wallet's row lock so the debit stays in flight.
        let blocker = try Connection(options: options)
        try blocker.execute("BEGIN")
        try blocker.execute("SELECT balance FROM wallet.wallets WHERE user_id = 'alice' FOR UPDATE")
        let client = try HTTPTestClient(port: port, timeoutSeconds: 20)
        try client.send(HTTPTestClient.requestBytes(
            method: "POST", path: "/v1/debits",
            headers: [("Authorization", "Bearer \(key)"), ("Content-Type", "application/json"), ("Idempotency-Key", "in-flight")],
            body: Array(#"{"user_id":"alice","amount":40}"#.utf8), port: port))
        #expect(TestDatabase.waitForLockWaiters(on: connection), "the debit never reached the held row")
        server.signal(SIGTERM)
        // Draining shuts the listening socket, so a refused connect shows the
        // signal has arrived while the debit is still held.
        #expect(waitFor(seconds: 20) { (try? HTTPTestClient(port: port, timeoutSeconds: 1)) == nil })
        try blocker.execute("COMMIT")

        let response = try client.readResponse()
        #expect(response.status == 201)
        #expect(server.waitForExit(seconds: 20) == 0)
        #expect(try connection.query("SELECT balance FROM wallet.wallets WHERE user_id = 'alice'")[0]
            .decode(Int64.self, at: 0) == 60)
    }

    @Test func embeddedDatabaseStartsAndStopsWithTheService() throws {
        let dataDirectory = NSTemporaryDirectory() + "wallet-embedded-\(UUID().uuidString.prefix(8))"
        defer { try? FileManager.default.removeItem(atPath: dataDirectory) }
        let server = try ServerProcess(binary: Self.walletBinary,
                                       environment: environment(["WALLET_DATA_DIR": dataDirectory,
                                                                 "WALLET_LISTEN": "127.0.0.1:0"]))
        defer { server.kill() }
        let port = try server.waitForPort(seconds: 90)
        #expect(try waitForReady(port: port, seconds: 60))
        // The first start of an empty database prints two development keys
        // and a key for the support console.
        #expect(server.waitForOutput(containing: "support-console (console):", seconds: 30))
        #expect(server.output.contains("game-server (debit, grant, read):"))
        #expect(server.output.contains("development database"))
        #expect(server.output.contains("binary: "))
        #expect(postgresProcesses(for: dataDirectory) > 0)
        // The psql line the banner prints works as printed.
        let printed = try #require(server.output.split(separator: "\n").first { $0.contains("psql: psql '") })
        let conninfo = String(printed.split(separator: "'")[1])
        let probe = Process()
        probe.executableURL = URL(fileURLWithPath: try LocalCluster.findBinaries() + "/psql")
        probe.arguments = [conninfo, "-XAtc", "SELECT count(*) FROM wallet.api_keys"]
        let answer = Pipe()
        probe.standardOutput = answer
        try probe.run()
        probe.waitUntilExit()
        #expect(probe.terminationStatus == 0)
        #expect(String(decoding: answer.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self) == "3\n")
        server.signal(SIGINT)
        #expect(server.waitForExit(seconds: 60) == 0)
        #expect(postgresProcesses(for: dataDirectory) == 0)
        // Other commands reach the same cluster when serve is not running.
        let keys = try wallet(["keys", "list"], ["WALLET_DATA_DIR": dataDirectory])
        #expect(keys.status == 0, "\(keys.error)")
        #expect(keys.output.contains("app-backend"))
        #expect(postgresProcesses(for: dataDirectory) == 0)
        // So does `wallet psql`, passing what follows `--` to psql.
        let psql = try wallet(["psql", "--", "-XAtc", "SELECT name FROM wallet.api_keys ORDER BY name"],
                              ["WALLET_DATA_DIR": dataDirectory])
        #expect(psql.status == 0, "\(psql.error)")
        #expect(psql.output == "app-backend\ngame-server\nsupport-console\n", "\(psql.output)")
        #expect(postgresProcesses(for: dataDirectory) == 0)

        // A second start finds keys and prints none.
        let again = try ServerProcess(binary: Self.walletBinary,
                                      environment: environment(["WALLET_DATA_DIR": dataDirectory,
                                                                "WALLET_LISTEN": "127.0.0.1:0"]))
        defer { again.kill() }
        let secondPort = try again.waitForPort(seconds: 90)
        #expect(try waitForReady(port: secondPort, seconds: 60))
        // While it runs, a command uses its socket and leaves it running.
        let check = try wallet(["check"], ["WALLET_DATA_DIR": dataDirectory])
        #expect(check.status == 0, "\(check.error)")
        #expect(try waitForReady(port: secondPort, seconds: 5))
        // Keys are printed, if at all, before the service waits for a signal,
        // so once its output has ended it is complete.
        again.signal(SIGTERM)
        #expect(again.waitForExit(seconds: 60) == 0)
        #expect(again.waitForEndOfOutput(seconds: 10))
        #expect(!again.output.contains("Development API keys"))
        #expect(postgresProcesses(for: dataDirectory) == 0)
    }

    @Test func appStoreVerifyDecodesARealTokenAndRefusesAForgery() throws {
        let vectors = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("AppStoreTests/Vectors")
        func token(_ name: String) throws -> String {
            let object = try JSONSerialization.jsonObject(with: Data(contentsOf: vectors.appendingPathComponent(name + ".json")))
            return ((object as? [String: Any])?["jws"] as? String) ?? ""
        }
        let valid = try wallet(["appstore", "verify", "--bundle-id", "com.cynet.xingqi", "--environment", "Sandbox",
                                "--app-apple-id", "1659344089"],
                               stdin: try token("real-notification-refund-1"))
        #expect(valid.status == 0, "\(valid.error)")
        #expect(valid.output.contains("\"notificationType\" : \"REFUND\"") || valid.output.contains("\"notificationType\":\"REFUND\""))
        #expect(valid.output.contains("2000000849195831"))
        let forged = try wallet(["appstore", "verify", "--bundle-id", "com.example"], stdin: try token("fake-wrong-root-2"))
        #expect(forged.status == 1)
        #expect(forged.error.contains("untrusted_root"))
    }

    private func postgresProcesses(for dataDirectory: String) -> Int {
        let entries = (try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? []
        return entries.filter { entry in
            guard Int(entry) != nil,
                  let command = try? String(contentsOfFile: "/proc/\(entry)/cmdline", encoding: .utf8) else { return false }
            return command.contains("postgres") && command.contains(dataDirectory)
        }.count
    }

    private func waitForReady(port: UInt16, seconds: Double = 30) throws -> Bool {
        waitFor(seconds: seconds) {
            guard let client = try? HTTPTestClient(port: port, timeoutSeconds: 5) else { return false }
            return (try? client.request(method: "GET", path: "/readyz"))?.status == 200
        }
    }
}
