import Foundation
import HTTPServer
import ServiceSupport
import WalletCore
import WalletStore

/// Endpoints for operators and tools, all without authentication: liveness,
/// readiness, Prometheus metrics and the OpenAPI document.
struct OperationsAPI: Sendable {
    let ledger: Ledger
    let readiness: Readiness
    let metrics: Metrics

    func register(on router: Router) {
        router.add("GET", "/healthz", sync: { _ in .json(ResponseBody.status("ok")) })
        router.add("GET", "/readyz", sync: readyz)
        router.add("GET", "/metrics", sync: { _ in
            .text(metrics.render(pool: ledger.poolStatistics, writerQueueDepth: ledger.groupCommit.queueDepth,
                                 writerQueueFullest: ledger.groupCommit.fullestQueueDepth,
                                 writerQueueDepthMax: ledger.groupCommit.queueDepthMax,
                                 readQueueDepth: ledger.balanceReadQueueDepth, ready: isReady()),
                  contentType: "text/plain; version=0.0.4; charset=utf-8")
        })
        router.add("GET", "/openapi.json", sync: { _ in
            Response(status: 200, headers: [("Content-Type", "application/json")], body: OpenAPI.document)
        })
    }

    /// Ready when the schema is in place and a database that takes writes
    /// answers a round trip now; the pool replaces dead connections, so this
    /// recovers by itself once PostgreSQL is back. `/readyz` and
    /// `wallet_ready` both answer from here.
    func isReady() -> Bool {
        guard readiness.isSchemaReady else { return false }
        return (try? ledger.ping()) != nil
    }

    func readyz(_ request: Request) throws -> Response {
        guard isReady() else { throw WalletError.databaseUnavailable }
        return .json(ResponseBody.status("ready"))
    }
}

enum OpenAPI {
    /// The hand-written document, compiled in from `Embedded/openapi.json`.
    static let document: [UInt8] = Array(EmbeddedFiles.named("openapi.json") ?? Data("{}".utf8))
}
