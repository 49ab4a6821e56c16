import Foundation
import HTTPServer
import JSON
import Postgres
import Testing
import TestSupport
import ServiceTestSupport

/// Every write the service makes carries its own `synchronous_commit`,
/// `lock_timeout` and `statement_timeout`, per transaction.
///
/// The service runs behind PgBouncer in transaction mode, set to discard
/// every session's settings after each transaction, in front of a database
/// whose default is `synchronous_commit = off` and no lock or statement
/// timeout. A settings the service made for its session therefore never
/// reaches its next transaction. A trigger on every ledger table records
/// the settings each writing statement ran with.
@Suite(.timeLimit(.minutes(3)))
struct PooledWriteSettingsTests {
    struct Failure: Error, CustomStringConvertible {
        var description: String
    }

    @Test func everyWriteCarriesItsSettingsThroughAPoolerThatForgetsSessions() throws {
        let cluster = try TestCluster.start(name: "pooled")
        defer { TestCluster.destroy(cluster) }
        let direct = try ChaosRun.migratedWalletDatabase(on: cluster)
        let observer = try Connection(options: .init(conninfo: direct))
        defer { observer.close() }
        try observer.executeScript(unsafeSQL: WriteObserver.sql + "ALTER DATABASE wallet SET synchronous_commit = off;")
        let bouncer = try PgBouncer(before: cluster, database: "wallet", resetEveryTransaction: true)
        defer { bouncer.stop() }
        let pooled = bouncer.conninfo(database: "wallet")
        func observed() throws -> [[String]] {
            try observer.query("""
                SELECT table_name, synchronous_commit, lock_timeout, statement_timeout FROM public.observed_writes
                ORDER BY table_name
                """).map { row in try (0..<4).map { try row.decode(String.self, at: $0) } }
        }

        // The command line's writes, through the pooler.
        let key = try ChaosRun.walletCommand(["keys", "create", "--name", "backend", "--scopes", "credit,debit,read"],
                                             databaseURL: pooled).lastLine
        let agent = try ChaosRun.walletCommand(["keys", "create", "--name", "agent", "--scopes", "console"],
                                               databaseURL: pooled).lastLine
        try ChaosRun.walletCommand(["keys", "create", "--name", "doomed", "--scopes", "read"], databaseURL: pooled)
        try ChaosRun.walletCommand(["keys", "create", "--name", "spare", "--scopes", "read"], databaseURL: pooled)
        try ChaosRun.walletCommand(["keys", "revoke", "spare"], databaseURL: pooled)
        let commandLine = try observed()
        #expect(commandLine.count == 5, "\(commandLine)")
        #expect(commandLine.allSatisfy { $0[1] == "on" }, "\(commandLine)")
        try observer.execute("TRUNCATE public.observed_writes")

        // The service's writes, through the pooler.
        let apple = try FakeAppStore()
        let rootFile = try RefundNotifications.writeRoot(of: apple)
        defer { try? FileManager.default.removeItem(atPath: rootFile) }
        let server = try ServerProcess(binary: CommandLineTests.walletBinary, environment: ChaosRun.walletEnvironment([
            "WALLET_DATABASE_URL": pooled, "WALLET_DATABASE_SESSION_URL": direct,
            "WALLET_DATABASE_PREPARED_STATEMENTS": "false", "WALLET_LISTEN": "127.0.0.1:0",
            "WALLET_LOCK_TIMEOUT_MILLISECONDS": "777", "WALLET_REQUEST_TIMEOUT_SECONDS": "9",
            "WALLET_CREDIT_VERIFICATION": "caller,appstore-jws", "WALLET_APPLE_BUNDLE_ID": FakeAppStore.bundleID,
            "WALLET_APPLE_ENVIRONMENTS": "Sandbox", "WALLET_APPLE_ROOT_CERTS": rootFile,
        ]))
        defer { server.kill() }
        let port = try server.waitForPort()
        guard waitFor(seconds: 30, { (try? StallTests.get(port: port, path: "/readyz"))?.status == 200 }) else {
            throw Failure(description: "wallet serve was not ready: \(server.output)")
        }
        func send(_ method: String, _ path: String, key: String?, _ body: String,
                  idempotencyKey: String? = nil) throws -> HTTPTestResponse {
            var headers: [(name: String, value: String)] = []
            if let idempotencyKey { headers.append(("Idempotency-Key", idempotencyKey)) }
            return try TestService.request(port: port, method, path, key: key, json: body, headers: headers,
                                           timeoutSeconds: 20)
        }
        func holdID(_ response: HTTPTestResponse) throws -> Int64 {
            guard case .object(let members)? = try response.json()["hold"],
                  case .number(let id)? = members.first(where: { $0.key == "id" })?.value, let value = Int64(id) else {
                throw Failure(description: "no hold id in \(response.text)")
            }
            return value
        }
        for (user, flowNo) in [("pooled", "p-1"), ("pooled", "p-2"), ("expiring", "p-3")] {
            let credit = try send("POST", "/v1/credits", key: key,
                                  #"{"user_id":"\#(user)","flow_no":"\#(flowNo)","product_id":"guodong600"}"#)
            #expect(credit.status == 201, "\(credit.text)")
        }
        let debit = try send("POST", "/v1/debits", key: key, #"{"user_id":"pooled","amount":10}"#, idempotencyKey: "d-1")
        #expect(debit.status == 201, "\(debit.text)")
        let toCapture = try holdID(send("POST", "/v1/holds", key: key, #"{"user_id":"pooled","amount":20}"#,
                                        idempotencyKey: "h-1"))
        let toRelease = try holdID(send("POST", "/v1/holds", key: key, #"{"user_id":"pooled","amount":30}"#,
                                        idempotencyKey: "h-2"))
        #expect(try send("POST", "/v1/holds/\(toCapture)/capture", key: key, "{}", idempotencyKey: "c-1").status == 201)
        #expect(try send("POST", "/v1/holds/\(toRelease)/release", key: key, "{}", idempotencyKey: "r-1").status == 200)
        // Left to the hold sweeper: nothing else touches this wallet.
        let expiring = try holdID(send("POST", "/v1/holds", key: key,
                                       #"{"user_id":"expiring","amount":40,"expires_in_seconds":1}"#, idempotencyKey: "h-3"))
        let refund = try send("POST", "/v1/appstore/notifications", key: nil, RefundNotifications.body(
            apple: apple, type: "REFUND", flowNo: "p-2", uuid: RefundNotifications.uuid(5),
            signedDateMilliseconds: FakeAppStore.signedDateMilliseconds + 1_000))
        #expect(refund.status == 200, "\(refund.text)")
        let junk = try send("POST", "/v1/appstore/notifications", key: nil, #"{"signedPayload":"not.a.jws"}"#)
        #expect(junk.status == 422, "\(junk.text)")
        // The console's writes: a session, a revocation, a sign-out.
        func form(_ path: String, cookie: String?, _ body: String) throws -> HTTPTestResponse {
            var headers: [(name: String, value: String)] = [("Content-Type", "application/x-www-form-urlencoded")]
            if let cookie { headers.append(("Cookie", cookie)) }
            return try TestService.request(port: port, "POST", path, key: nil, json: nil, headers: headers, body: body,
                                           timeoutSeconds: 20)
        }
        let signIn = try form("/admin/login", cookie: nil, "api_key=" + Forms.percentEncoded(agent))
        #expect(signIn.status == 303, "\(signIn.text)")
        let cookie = try #require(signIn.header("Set-Cookie")?.split(separator: ";").first.map(String.init))
        let keysPage = try TestService.request(port: port, "GET", "/admin/keys", key: nil, json: nil,
                                               headers: [("Cookie", cookie)],
                                               timeoutSeconds: 20)
        let csrf = try #require(ConsoleTests.csrfToken(in: keysPage.text))
        #expect(try form("/admin/keys/doomed/revoke", cookie: cookie, "csrf=\(csrf)").status == 303)
        #expect(try form("/admin/logout", cookie: cookie, "csrf=\(csrf)").status == 303)
        #expect(waitFor(seconds: 20) {
            (try? observer.query("SELECT status FROM wallet.holds WHERE id = \(expiring)")[0].decode(String.self, at: 0))
                == "expired"
        }, "the hold sweeper never expired the hold")
        #expect(waitFor(seconds: 10) {
            (try? observer.query("SELECT count(*) FROM wallet.appstore_refused_notifications")[0].decode(Int.self, at: 0))
                == 1
        }, "the refusal was never recorded")

        let service = try observed()
        let tables = Set(service.map { $0[0] })
        for table in ["api_keys", "credits", "entries", "wallets", "idempotency_keys", "holds", "appstore_notifications",
                      "appstore_refused_notifications", "admin_sessions", "admin_audit", "console_cookie_keys"] {
            #expect(tables.contains(table), "no write to \(table) was seen: \(tables.sorted())")
        }
        let unsettled = service.filter { $0[1] != "on" || $0[2] != "777ms" || $0[3] != "10s" }
        #expect(unsettled.isEmpty, "writes without their settings (table, synchronous_commit, lock_timeout, statement_timeout): \(unsettled)")
        let check = try StallTests.check(databaseURL: direct)
        #expect(check.status == 0, "\(check.output)")
    }
}
