import Foundation
import Locking
import Testing
import TestSupport
import WalletClient

/// The retry rule against real faults: a loopback stand-in in front of the
/// real service answers 503 with `Retry-After` or drops the connection when
/// told to, and otherwise passes each request through to the service and
/// its answer back. Nothing here answers for the service.
@Suite(.serialized, .timeLimit(.minutes(1)))
struct RetryTests {
    @Test func a503WithRetryAfterAndADroppedConnectionAreRetriedWithOneKey() async throws {
        let fixture = try await Fixture.make()
        let player = fixture.unique("retry")
        _ = try await fixture.app.createCredit(userID: player, flowNo: fixture.unique("flow"), productID: "guodong600")
        let injector = try FaultInjector(servicePort: fixture.wallet.port,
                                         faults: [.serviceUnavailable(retryAfterSeconds: 1), .forwardThenDrop])
        defer { injector.stop() }
        let client = WalletClient(baseURL: injector.baseURL, apiKey: fixture.wallet.gameServerKey)

        let result = try await client.createDebit(userID: player, amount: 70, reason: "retried")

        let arrivals = injector.arrivals
        #expect(arrivals.count == 3)
        let key = try #require(result.idempotencyKey)
        #expect(arrivals.map(\.idempotencyKey) == [key, key, key])
        // The second attempt reached the service and its answer was lost, so
        // the third is answered from what the key stored.
        #expect(result.replayed)
        #expect(result.attempts == 3)
        #expect(result.balance.balance == 530)
        // Retry-After: 1 was honoured before the second attempt.
        #expect(arrivals[1].at - arrivals[0].at >= .milliseconds(950))
        #expect(client.retryCount == 2)
        #expect(client.statistics.retriesAfterRetryAfter == 1)
        #expect(client.statistics.retriesAfterConnectionFailure == 1)

        var applied: [Entry] = []
        for try await entry in fixture.game.entries(userID: player) where entry.reference == key { applied.append(entry) }
        #expect(applied.map(\.amount) == [-70])
        #expect(try await fixture.game.getWallet(userID: player).balance(in: "coin")?.balance == 530)
    }

    @Test func aDefinitiveAnswerIsNotRetried() async throws {
        let fixture = try await Fixture.make()
        let injector = try FaultInjector(servicePort: fixture.wallet.port, faults: [])
        defer { injector.stop() }
        let client = WalletClient(baseURL: injector.baseURL, apiKey: fixture.wallet.gameServerKey)

        await #expect(throws: InsufficientFundsError.self) {
            try await client.createDebit(userID: fixture.unique("empty"), amount: 1)
        }
        #expect(injector.arrivals.count == 1)
        #expect(client.retryCount == 0)
    }

    @Test func aRetryAfterLongerThanTheTimeLeftEndsTheCallWithTheProblem() async throws {
        let fixture = try await Fixture.make()
        let injector = try FaultInjector(servicePort: fixture.wallet.port,
                                         faults: Array(repeating: .serviceUnavailable(retryAfterSeconds: 30), count: 3))
        defer { injector.stop() }
        let client = WalletClient(baseURL: injector.baseURL, apiKey: fixture.wallet.gameServerKey,
                                  retryPolicy: RetryPolicy(maxTotalTime: .seconds(1)))

        let overloaded = try await #require(throws: OverloadedError.self) {
            try await client.createDebit(userID: fixture.unique("late"), amount: 1)
        }
        // The pause was cut to the time left, which then ran out: one attempt.
        #expect(overloaded.problem.retryAfterSeconds == 30)
        #expect(overloaded.problem.attempts == 1)
        #expect(injector.arrivals.count == 1)
    }

    @Test func nothingListeningIsATransportErrorAfterEveryAttempt() async throws {
        // A bound socket that does not listen: connections to it are refused.
        let (socket, port) = try FakeVerifyReceiptServer.bindLoopback(listen: false)
        defer { close(socket) }
        let client = WalletClient(baseURL: URL(string: "http://127.0.0.1:\(port)")!, apiKey: "wk_unused",
                                  retryPolicy: RetryPolicy(maxAttempts: 3))

        let failure = try await #require(throws: WalletTransportError.self) {
            try await client.createDebit(userID: "nobody", amount: 1)
        }
        #expect(failure.attempts == 3)
        #expect(failure.underlying is URLError)
        #expect(failure.idempotencyKey != nil)
        #expect(client.retryCount == 2)
        #expect(client.statistics.retriesAfterConnectionFailure == 2)
    }
}

/// A loopback HTTP stand-in in front of the real service. Request `n`
/// meets `faults[n]` if there is one, else passes through.
final class FaultInjector: Sendable {
    enum Fault: Sendable {
        /// Answer 503 `overloaded` with `Retry-After`, without asking the service.
        case serviceUnavailable(retryAfterSeconds: Int)
        /// Pass the request to the service, then close the connection
        /// without a byte of its answer.
        case forwardThenDrop
    }

    struct Arrival: Sendable {
        var idempotencyKey: String?
        var at: ContinuousClock.Instant
    }

    private let server: FakeVerifyReceiptServer
    private let recorded: Locked<[Arrival]>

    var baseURL: URL { URL(string: "http://127.0.0.1:\(server.port)")! }
    var arrivals: [Arrival] { recorded.withLock { $0 } }

    init(servicePort: UInt16, faults: [Fault]) throws {
        let recorded = Locked<[Arrival]>([])
        self.recorded = recorded
        server = try FakeVerifyReceiptServer(reply: .decided { request in
            let index = recorded.withLock { list in
                list.append(Arrival(idempotencyKey: request.headers["idempotency-key"], at: .now))
                return list.count - 1
            }
            switch index < faults.count ? faults[index] : nil {
            case .serviceUnavailable(let seconds):
                let body = #"{"type":"urn:problem:overloaded","title":"Overloaded","status":503,"#
                    + #""detail":"injected","code":"overloaded","instance":"injected-\#(index)"}"#
                return .http(status: 503, headers: ["Content-Type: application/problem+json", "Retry-After: \(seconds)"],
                             body: body)
            case .forwardThenDrop:
                _ = try? Self.forward(request, to: servicePort)
                return .raw("")
            case nil:
                guard let answer = try? Self.forward(request, to: servicePort) else { return .raw("") }
                let headers = answer.headers
                    .filter { !["content-length", "connection", "transfer-encoding", "keep-alive"].contains($0.name.lowercased()) }
                    .map { "\($0.name): \($0.value)" }
                return .http(status: answer.status, headers: headers, body: answer.text)
            }
        }, lifetimeSeconds: 50)
    }

    func stop() {
        server.stop()
    }

    private static func forward(_ request: FakeVerifyReceiptServer.Request, to port: UInt16) throws -> HTTPTestResponse {
        let upstream = try HTTPTestClient(port: port, timeoutSeconds: 10)
        defer { upstream.close() }
        let passed = request.headers
            .filter { !["host", "content-length", "connection", "expect", "accept-encoding", "transfer-encoding"].contains($0.key) }
            .map { (name: $0.key, value: $0.value) }
        return try upstream.request(method: request.method, path: request.path, headers: passed, body: Array(request.body))
    }
}
