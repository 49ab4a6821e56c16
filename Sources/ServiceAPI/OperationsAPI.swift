import Foundation
import HTTPServer
import ServiceSupport
import WalletCore
import WalletStore

/// Endpoints for operators and tools: liveness, readiness and Prometheus
/// metrics (on the operations port when there is one; `/metrics` asks for
/// a bearer token when one is set), and the OpenAPI document (always on the
/// API port), all without an API key.
struct OperationsAPI: Sendable {
    let ledger: Ledger
    let readiness: Readiness
    let metrics: Metrics
    /// What `/metrics` asks for as `Authorization: Bearer …`; nil: nothing.
    let metricsToken: String?

    /// `/healthz`, `/readyz` and `/metrics`.
    func registerProbes(on router: Router) {
        router.add("GET", "/healthz", sync: { _ in .json(ResponseBody.status("ok")) })
        router.add("GET", "/readyz", sync: readyz)
        router.add("GET", "/metrics", sync: { request in
            try admitScraper(request)
            return .text(metrics.render(pool: ledger.poolStatistics, writerQueueDepth: ledger.groupCommit.queueDepth,
                                        writerQueueFullest: ledger.groupCommit.fullestQueueDepth,
                                        writerQueueDepthMax: ledger.groupCommit.queueDepthMax,
                                        readQueueDepth: ledger.balanceReadQueueDepth, ready: isReady()),
                         contentType: "text/plain; version=0.0.4; charset=utf-8")
        })
    }

    /// `/openapi.json`.
    func registerDocument(on router: Router) {
        router.add("GET", "/openapi.json", sync: { _ in
            Response(status: 200, headers: [("Content-Type", "application/json")], body: OpenAPI.document)
        })
    }

    /// With a metrics token, a scrape must carry it: `wallet_coins_total`
    /// is a revenue figure. Compared in constant time.
    private func admitScraper(_ request: Request) throws {
        guard let metricsToken else { return }
        let expected = Array("Bearer \(metricsToken)".utf8)
        let given = Array((request.headers["authorization"] ?? "").utf8)
        var difference = UInt8(given.count == expected.count ? 0 : 1)
        for index in expected.indices {
            difference |= expected[index] ^ (index < given.count ? given[index] : 0)
        }
        guard difference == 0 else { throw WalletError.unauthorized }
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
