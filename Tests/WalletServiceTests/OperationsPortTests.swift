import Foundation
import JSON
import ServiceTestSupport
import Testing
import TestSupport
@testable import WalletService

/// WALLET_OPS_LISTEN moves the probes and metrics off the API port, and
/// WALLET_METRICS_TOKEN_FILE puts `/metrics` behind a bearer token, through
/// the real servers on real sockets.
@Suite(.timeLimit(.minutes(2)))
struct OperationsPortTests {
    static func get(_ port: UInt16, _ path: String, headers: [(name: String, value: String)] = []) throws
        -> HTTPTestResponse {
        try TestService.request(port: port, "GET", path, key: nil, json: nil, headers: headers, timeoutSeconds: 10)
    }

    /// A token file in a fresh directory.
    static func tokenFile(_ token: String) throws -> String {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("wallet-ops-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let file = directory.appendingPathComponent("metrics-token")
        try Data((token + "\n").utf8).write(to: file)
        return file.path
    }

    @Test func probesAndMetricsMoveToTheOperationsPort() throws {
        let service = try TestService { $0.opsListen = .init(host: "127.0.0.1", port: 0) }
        defer { service.stop() }
        let ops = try #require(service.application.operationsPort)
        #expect(ops != service.port)
        for path in ["/metrics", "/healthz", "/readyz"] {
            let onAPI = try Self.get(service.port, path)
            #expect(onAPI.status == 404, "\(path) on the API port: \(onAPI.status)")
            let onOps = try Self.get(ops, path)
            #expect(onOps.status == 200, "\(path) on the operations port: \(onOps.text)")
        }
        #expect(try Self.get(ops, "/metrics").text.contains("wallet_ready 1"))
        // The API and its document stay on the API port, and only there.
        #expect(try Self.get(service.port, "/openapi.json").status == 200)
        #expect(try Self.get(ops, "/openapi.json").status == 404)
        #expect(try Self.get(ops, "/v1/wallets/ana").status == 404)
        #expect(try service.request("GET", "/v1/wallets/ana", key: service.gameServerKey).status == 200)
    }

    @Test func aMetricsTokenGuardsMetricsAlone() throws {
        let token = "scrape-\(UUID().uuidString)"
        let path = try Self.tokenFile(token)
        let service = try TestService {
            $0.opsListen = .init(host: "127.0.0.1", port: 0)
            $0.metricsTokenFile = path
        }
        defer { service.stop() }
        let ops = try #require(service.application.operationsPort)
        let bare = try Self.get(ops, "/metrics")
        #expect(bare.status == 401)
        #expect(try bare.json()["code"] == "unauthorized")
        #expect(bare.header("WWW-Authenticate") == "Bearer")
        for wrong in ["Bearer \(token)x", "Bearer \(token.dropLast())", "bearer \(token)", token, "Bearer "] {
            #expect(try Self.get(ops, "/metrics", headers: [("Authorization", wrong)]).status == 401, "\(wrong)")
        }
        let scraped = try Self.get(ops, "/metrics", headers: [("Authorization", "Bearer \(token)")])
        #expect(scraped.status == 200)
        #expect(scraped.text.contains("wallet_coins_total"))
        // Probes stay open: an orchestrator asks them without a token.
        #expect(try Self.get(ops, "/healthz").status == 200)
        #expect(try Self.get(ops, "/readyz").status == 200)
    }

    /// Without an operations port the token guards `/metrics` on the API port.
    @Test func withoutAnOperationsPortTheTokenGuardsTheAPIPortsMetrics() throws {
        let token = "scrape-\(UUID().uuidString)"
        let path = try Self.tokenFile(token)
        let service = try TestService { $0.metricsTokenFile = path }
        defer { service.stop() }
        #expect(service.application.operationsPort == nil)
        #expect(try Self.get(service.port, "/metrics").status == 401)
        #expect(try Self.get(service.port, "/metrics", headers: [("Authorization", "Bearer \(token)")]).status == 200)
        #expect(try Self.get(service.port, "/healthz").status == 200)
    }

    @Test func badSettingsStopStartUpNamingTheirVariable() throws {
        func refusal(_ environment: [String: String]) -> Configuration.ConfigurationError? {
            do {
                let configuration = try Configuration.load(environment: environment)
                try configuration.validateForServing()
                return nil
            } catch {
                return error
            }
        }
        #expect(refusal(["WALLET_OPS_LISTEN": "nine"])?.variable == "WALLET_OPS_LISTEN")
        #expect(refusal(["WALLET_OPS_LISTEN": "127.0.0.1:8080"])?.variable == "WALLET_OPS_LISTEN")
        #expect(refusal(["WALLET_LISTEN": "127.0.0.1:9000", "WALLET_OPS_LISTEN": "0.0.0.0:9000"])?.variable
            == "WALLET_OPS_LISTEN")
        #expect(refusal(["WALLET_OPS_LISTEN": "0.0.0.0:9090"]) == nil)
        #expect(refusal(["WALLET_METRICS_TOKEN_FILE": "/nonexistent/token"])?.variable == "WALLET_METRICS_TOKEN_FILE")
        #expect(refusal(["WALLET_METRICS_TOKEN_FILE": try Self.tokenFile("short")])?.variable
            == "WALLET_METRICS_TOKEN_FILE")
        #expect(refusal(["WALLET_METRICS_TOKEN_FILE": try Self.tokenFile("two words but long enough")])?.variable
            == "WALLET_METRICS_TOKEN_FILE")
        #expect(refusal(["WALLET_METRICS_TOKEN_FILE": try Self.tokenFile("0123456789abcdef")]) == nil)
    }
}
