import Foundation
import HTTPServer
import JSON
import Postgres
import Testing
import Logging
import TestSupport
import WalletService
import ServiceTestSupport
@testable import WalletStore

/// Health, readiness and metrics, and the service's behaviour while its
/// database comes and goes.
@Suite(.timeLimit(.minutes(3)))
struct OperationsTests {
    @Test func healthAndMetricsNeedNoKey() throws {
        let service = try TestService()
        defer { service.stop() }
        let health = try service.request("GET", "/healthz")
        #expect(health.status == 200)
        #expect(try health.json() == .object([("status", "ok")]))
        #expect(try service.request("GET", "/readyz").status == 200)
        _ = try service.credit(userID: "m", flowNo: "metrics-1")
        _ = try service.request("GET", "/nowhere")
        let metrics = try service.request("GET", "/metrics")
        #expect(metrics.status == 200)
        #expect(metrics.header("Content-Type")?.hasPrefix("text/plain; version=0.0.4") == true)
        let text = metrics.text
        #expect(text.contains(#"wallet_http_requests_total{route="/v1/credits",method="POST",status="2xx"} 1"#))
        #expect(text.contains(#"wallet_http_requests_total{route="unmatched",method="GET",status="4xx"} 1"#))
        #expect(text.contains(#"wallet_http_request_duration_seconds_bucket{route="/v1/credits",method="POST",status="2xx",le="+Inf"} 1"#))
        #expect(text.contains("wallet_db_pool_connections "))
        #expect(text.contains("wallet_db_pool_waiting "))
        #expect(text.contains(#"wallet_batch_operations_count{operation="credit"} 1"#))
        #expect(text.contains("wallet_writer_queue_depth 0\n"))
        #expect(text.contains("wallet_read_queue_depth 0\n"))
        // Every sample line is `name{labels} value` with a wallet_ prefix.
        for line in text.split(separator: "\n") where !line.hasPrefix("#") {
            #expect(line.hasPrefix("wallet_"), "\(line)")
            #expect(Double(line.split(separator: " ").last ?? "") != nil, "\(line)")
        }
    }

    @Test func everyResponseCarriesARequestID() throws {
        let service = try TestService()
        defer { service.stop() }
        let kept = try service.request("GET", "/healthz", headers: [("X-Request-Id", "trace-abc-123")])
        #expect(kept.header("X-Request-Id") == "trace-abc-123")
        let problem = try service.request("GET", "/v1/wallets/x", headers: [("X-Request-Id", "trace-401")])
        #expect(problem.header("X-Request-Id") == "trace-401")
        #expect(try problem.json()["instance"] == "trace-401")
        let replaced = try service.request("GET", "/healthz", headers: [("X-Request-Id", String(repeating: "r", count: 129))])
        #expect(replaced.header("X-Request-Id").map { !$0.isEmpty && $0.count <= 128 } == true)
        let notFound = try service.request("DELETE", "/v1/wallets/x")
        #expect(notFound.status == 405)
        #expect(notFound.header("Allow") == "GET")
        #expect(try notFound.json()["code"] == "method_not_allowed")
    }

    @Test func readinessFollowsTheDatabaseWithoutARestart() throws {
        let cluster = try TestCluster.start(name: "readyz")
        defer { TestCluster.destroy(cluster) }
        let admin = try Connection(options: .init(conninfo: cluster.conninfo()))
        try admin.execute("CREATE DATABASE wallet")
        admin.close()
        var options = Connection.Options(conninfo: cluster.conninfo())
        options.database = "wallet"
        let service = try TestService(database: try migrated(options)) { $0.requestTimeoutSeconds = 2 }
        defer { service.stop() }
        #expect(try service.request("GET", "/readyz").status == 200)

        try cluster.stop(mode: .fast)
        let down = try service.request("GET", "/readyz")
        #expect(down.status == 503)
        #expect(try down.json()["code"] == "database_unavailable")
        // Money requests get a prompt 503 with Retry-After, not a hang.
        let started = Date()
        let credit = try service.credit(userID: "u", flowNo: "while-down")
        #expect(credit.status == 503)
        #expect(credit.header("Retry-After") != nil)
        #expect(Date().timeIntervalSince(started) < 10)

        try cluster.start()
        let back = Date()
        #expect(waitFor(seconds: 10) { (try? service.request("GET", "/readyz").status) == 200 })
        #expect(Date().timeIntervalSince(back) < 5)
        #expect(try service.credit(userID: "u", flowNo: "after-restart").status == 201)
    }

    @Test func theServiceStartsBeforeItsDatabaseAndBecomesReady() throws {
        let cluster = try TestCluster.start(name: "late")
        defer { TestCluster.destroy(cluster) }
        let admin = try Connection(options: .init(conninfo: cluster.conninfo()))
        try admin.execute("CREATE DATABASE wallet")
        admin.close()
        try cluster.stop(mode: .fast)
        var options = Connection.Options(conninfo: cluster.conninfo())
        options.database = "wallet"
        let service = try TestService.unstarted(database: options)
        defer { service.shutdown() }
        try service.start()
        #expect(service.waitUntilReady(timeoutSeconds: 1) == false)
        try cluster.start()
        #expect(service.waitUntilReady(timeoutSeconds: 30))
    }

    private func migrated(_ options: Connection.Options) throws -> Connection.Options {
        let connection = try Connection(options: options)
        defer { connection.close() }
        try Schema.migrator(logger: Logger(label: "test", sink: .discard)).migrate(connection: connection)
        return options
    }
}
