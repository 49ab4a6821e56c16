import Foundation
import Testing
import TestSupport
import WalletService
import ServiceTestSupport

/// Metric labels take values from fixed sets only, whatever clients send.
@Suite(.timeLimit(.minutes(2)))
struct MetricsLabelTests {
    @Test func madeUpMethodsLeaveMetricsSmall() throws {
        let service = try TestService()
        defer { service.stop() }
        // Every route's series exist from start-up; made-up requests must
        // add at most the one `unmatched` series.
        let before = try service.request("GET", "/metrics").body.count
        var random = SplitMix64(seed: 12)
        let letters = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZ".utf8)
        for _ in 0..<300 {
            let method = String(decoding: (0..<3_000).map { _ in letters[Int(random.next() % 26)] }, as: UTF8.self)
            let client = try service.client()
            let response = try client.request(method: method, path: "/made/up/\(random.next())")
            #expect(response.status == 404)
        }
        let metrics = try service.request("GET", "/metrics")
        #expect(metrics.status == 200)
        #expect(metrics.body.count - before < 4 << 10, "the exposition grew from \(before) to \(metrics.body.count) bytes")
        // The whole exposition's budget: it grows with the routes (each has
        // a latency histogram per status class from start-up), never with
        // what clients send.
        #expect(metrics.body.count < 160 << 10)
        #expect(metrics.text.contains(#"wallet_http_requests_total{route="unmatched",method="other",status="4xx"} 300"#))
    }
}
