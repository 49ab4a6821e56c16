import Foundation
import Testing
import TestSupport
import ServiceTestSupport
import WalletService

#if canImport(Glibc)
import Glibc
#endif

/// One client address cannot take every connection of the real `wallet
/// serve`: it gets `WALLET_MAX_CONNECTIONS_PER_IP` (64 by default), the
/// rest of its connections are closed as they arrive, and another address
/// is served at once.
@Suite(.timeLimit(.minutes(2)))
struct ConnectionLimitTests {
    /// As many idle sockets as the service's default `WALLET_MAX_CONNECTIONS`.
    static let idleSockets = 1_024
    static let perAddressDefault = 64
    /// Descriptors beside the sockets: the test runner's own, the database's.
    static let descriptorsSpare = 256

    @Test func idleSocketsFromOneAddressLeaveRoomForAnother() throws {
        // The test and the service it starts (which inherits the limit) each
        // hold one descriptor per socket.
        let limit = try #require(raiseDescriptorLimit())
        try #require(limit >= Self.idleSockets + Self.descriptorsSpare,
                     "RLIMIT_NOFILE is \(limit); \(Self.idleSockets + Self.descriptorsSpare) descriptors are needed")
        let database = try TestDatabase.make()
        var environment = ProcessInfo.processInfo.environment.filter { !$0.key.hasPrefix("WALLET_") }
        environment["WALLET_LOG_LEVEL"] = "warning"
        environment["WALLET_DATABASE_URL"] = TestService.conninfo(database)
        environment["WALLET_LISTEN"] = "127.0.0.1:0"
        environment["WALLET_CREDIT_VERIFICATION"] = "caller"
        environment["WALLET_HTTP_THREADS"] = "2"
        // WALLET_MAX_CONNECTIONS (1024), WALLET_MAX_CONNECTIONS_PER_IP (64) and
        // WALLET_REQUEST_TIMEOUT_SECONDS (10) keep their defaults.
        let server = try ServerProcess(binary: CommandLineTests.walletBinary, environment: environment, capturingLog: true)
        defer { server.kill() }
        let port = try server.waitForPort()
        #expect(try HTTPTestClient(port: port).request(method: "GET", path: "/healthz").status == 200)

        // Sockets from 127.0.0.1 that never send a byte.
        var idle: [HTTPTestClient] = []
        idle.reserveCapacity(Self.idleSockets)
        for _ in 0..<Self.idleSockets {
            idle.append(try HTTPTestClient(port: port, timeoutSeconds: 10))
        }

        // Another address. The service accepts in arrival order, so this
        // connection comes after every idle one.
        let started = HTTPTestClient.now()
        let other = try HTTPTestClient(port: port, sourceHost: "127.0.0.2", timeoutSeconds: 30)
        let answer = try other.request(method: "GET", path: "/healthz")
        let waitedSeconds = HTTPTestClient.now() - started
        print("a request from 127.0.0.2 beside \(Self.idleSockets) idle sockets from 127.0.0.1 was answered after "
              + "\(String(format: "%.3f", waitedSeconds)) s")
        #expect(answer.status == 200)
        #expect(waitedSeconds < 1, "answered after \(waitedSeconds) s")

        // The first 64 are kept (until the request timeout); every other one
        // was closed when it arrived, without an answer.
        let refusedExpected = Self.idleSockets - Self.perAddressDefault
        var closed = 0
        _ = waitFor(seconds: 5) {
            closed = idle.count { $0.isReadable(within: 0) }
            return closed >= refusedExpected
        }
        #expect(closed == refusedExpected, "\(closed) of \(Self.idleSockets) idle sockets closed")
        let answered = idle.filter { $0.isReadable(within: 0) && (try? $0.readResponse()) != nil }.count
        #expect(answered == 0, "\(answered) refused sockets got an HTTP answer")
        // Refusals are logged in summary, not once each.
        let refusalLines = server.output.split(separator: "\n").filter { $0.contains("connections refused") }
        #expect((1...2).contains(refusalLines.count), "\(refusalLines.count) log lines about refused connections")
        withExtendedLifetime(idle) {}
    }

    @Test func thePerAddressLimitIsReadOnceWithinTheTotal() throws {
        #expect(try Configuration.load(environment: [:]).connectionsPerIPMax == Self.perAddressDefault)
        // The default never exceeds the total.
        #expect(try Configuration.load(environment: ["WALLET_MAX_CONNECTIONS": "16"]).connectionsPerIPMax == 16)
        let set = try Configuration.load(environment: ["WALLET_MAX_CONNECTIONS": "4096", "WALLET_MAX_CONNECTIONS_PER_IP": "2000"])
        #expect(set.connectionsPerIPMax == 2000)
        for (total, perAddress) in [("1024", "1025"), ("1024", "0"), ("1024", "many"), ("8", "9")] {
            do {
                _ = try Configuration.load(environment: ["WALLET_MAX_CONNECTIONS": total,
                                                         "WALLET_MAX_CONNECTIONS_PER_IP": perAddress])
                Issue.record("\(perAddress) of \(total) accepted")
            } catch {
                #expect(error.variable == "WALLET_MAX_CONNECTIONS_PER_IP")
                #expect(error.message == "must be an integer from 1 to \(total)")
            }
        }
    }

    /// Raises this process's soft limit on open descriptors to its hard
    /// limit, and returns the soft limit now in force.
    private func raiseDescriptorLimit() -> Int? {
        var limit = rlimit()
        guard getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0 else { return nil }
        if limit.rlim_cur < limit.rlim_max {
            var raised = limit
            raised.rlim_cur = limit.rlim_max
            if setrlimit(Int32(RLIMIT_NOFILE.rawValue), &raised) == 0 { limit = raised }
        }
        return Int(clamping: limit.rlim_cur)
    }
}
