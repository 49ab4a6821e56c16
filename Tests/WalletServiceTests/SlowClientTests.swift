import Foundation
import Locking
import Testing
import TestSupport
@testable import ServiceAPI
@testable import ServiceSupport
@testable import WalletService
import ServiceTestSupport

/// Clients that send a request a byte at a time cannot keep the service's
/// connection slots: the request timeout bounds the whole request, headers
/// included, through the real `wallet` binary.
@Suite(.timeLimit(.minutes(2)))
struct SlowClientTests {
    static let connectionsMax = 64
    static let requestTimeoutSeconds = 3.0

    @Test func drippingClientsLoseTheirSlotsAtTheRequestDeadline() throws {
        let database = try TestDatabase.make()
        var environment = ProcessInfo.processInfo.environment.filter { !$0.key.hasPrefix("WALLET_") }
        environment["WALLET_LOG_LEVEL"] = "error"
        environment["WALLET_DATABASE_URL"] = TestService.conninfo(database)
        environment["WALLET_LISTEN"] = "127.0.0.1:0"
        environment["WALLET_CREDIT_VERIFICATION"] = "caller"
        environment["WALLET_HTTP_THREADS"] = "2"
        environment["WALLET_MAX_CONNECTIONS"] = String(Self.connectionsMax)
        environment["WALLET_REQUEST_TIMEOUT_SECONDS"] = String(Int(Self.requestTimeoutSeconds))
        let server = try ServerProcess(binary: CommandLineTests.walletBinary, environment: environment)
        defer { server.kill() }
        let port = try server.waitForPort()
        #expect(try HTTPTestClient(port: port).request(method: "GET", path: "/healthz").status == 200)

        // Every slot taken by a client that drips a header byte a second.
        let request = Array("GET /healthz HTTP/1.1\r\nHost: wallet\r\nX-Slow: ".utf8)
        var drippers: [(client: HTTPTestClient, opened: Double, closed: Double?)] = []
        for _ in 0..<Self.connectionsMax {
            let client = try HTTPTestClient(port: port, timeoutSeconds: 2)
            try client.send([request[0]])
            drippers.append((client, HTTPTestClient.now(), nil))
        }

        // A normal client, retrying while it finds no slot.
        let answered = Locked<(status: Int, seconds: Double)?>(nil)
        let done = DispatchSemaphore(value: 0)
        let normal = Thread {
            let started = HTTPTestClient.now()
            let until = started + Self.requestTimeoutSeconds + 10
            while HTTPTestClient.now() < until {
                if let client = try? HTTPTestClient(port: port, timeoutSeconds: 2),
                   let response = try? client.request(method: "GET", path: "/healthz") {
                    answered.withLock { $0 = (response.status, HTTPTestClient.now() - started) }
                    break
                }
                // The normal client's pace between tries: what it does, not
                // a wait for the server.
                Thread.sleep(forTimeInterval: 0.1)
            }
            done.signal()
        }
        normal.start()

        var sent = 1
        let until = HTTPTestClient.now() + Self.requestTimeoutSeconds + 15
        while drippers.contains(where: { $0.closed == nil }), HTTPTestClient.now() < until {
            // The dripping client's pace, not a wait for the server.
            Thread.sleep(forTimeInterval: 1)
            let byte = sent < request.count ? request[sent] : UInt8(ascii: "a")
            sent += 1
            for index in drippers.indices where drippers[index].closed == nil {
                let client = drippers[index].client
                if client.isReadable(within: 0) && client.waitForClose(seconds: 0.05) {
                    drippers[index].closed = HTTPTestClient.now()
                } else if (try? client.send([byte])) == nil {
                    drippers[index].closed = HTTPTestClient.now()
                }
            }
        }
        #expect(done.wait(timeout: .now() + 20) == .success)

        let normalAnswer = answered.withLock { $0 }
        #expect(normalAnswer?.status == 200)
        if let normalAnswer {
            #expect(normalAnswer.seconds < Self.requestTimeoutSeconds + 6)
        }
        let held = drippers.compactMap { dripper in dripper.closed.map { $0 - dripper.opened } }
        #expect(held.count == Self.connectionsMax, "\(Self.connectionsMax - held.count) dripping clients kept their slot")
        #expect((held.max() ?? .infinity) < Self.requestTimeoutSeconds + 4)
        print("slow clients: \(held.count) of \(Self.connectionsMax) cut; slot held \(String(format: "%.1f", held.min() ?? 0))–"
              + "\(String(format: "%.1f", held.max() ?? 0)) s; normal request answered after "
              + "\(normalAnswer.map { String(format: "%.1f", $0.seconds) } ?? "never") s")
    }
}
