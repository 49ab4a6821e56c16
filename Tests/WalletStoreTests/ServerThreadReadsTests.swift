import Foundation
import Locking
import Logging
import Postgres
import Synchronization
import Testing
import TestSupport
import WalletCore

#if canImport(Glibc)
import Glibc
@testable import WalletStore
#endif

/// Server-thread reads against a database that takes connections and never
/// answers, as a stalled PostgreSQL does.
@Suite(.timeLimit(.minutes(1)))
struct ServerThreadReadsTests {
    @Test func aStalledDatabaseCostsOneBoundedWaitPerQuietPeriod() throws {
        let silent = try SilentListener()
        defer { silent.stop() }
        let pool = silent.pool()
        defer { pool.shutdown() }
        let metrics = RecordedStoreMetrics()
        let clock = ManualClock(movesWithRealTime: false)
        let reads = ServerThreadReads(pool: pool, metrics: metrics, clock: clock)
        let read = { try reads.run { try $0.prepared("SELECT 1") } }

        // The first read waits its bounded second on the silent server.
        #expect(throws: WalletError.databaseUnavailable) { try read() }
        let afterFirst = silent.accepted
        #expect(afterFirst >= 1)
        // The next ones, right after, do not reach for the database at all.
        for _ in 0..<20 {
            #expect(throws: WalletError.databaseUnavailable) { try read() }
        }
        #expect(silent.accepted == afterFirst)
        #expect(metrics.databaseErrors("fast_fail") == 20)

        // Just before the quiet period is over, still no probe; once it is, a
        // read probes the database again.
        clock.advance(by: ServerThreadReads.quiet - .milliseconds(1))
        #expect(throws: WalletError.databaseUnavailable) { try read() }
        #expect(silent.accepted == afterFirst)
        clock.advance(by: .milliseconds(1))
        #expect(throws: WalletError.databaseUnavailable) { try read() }
        #expect(silent.accepted > afterFirst)
    }

    /// Balance reads queued while the database is stalled share the wait of
    /// the batch that carries them: forty reads answer 503 in a few seconds
    /// at most, not forty seconds, and the database is asked once or twice.
    @Test func batchedBalanceReadsShareOneBoundedWait() throws {
        let silent = try SilentListener()
        defer { silent.stop() }
        let pool = silent.pool()
        defer { pool.shutdown() }
        let reads = BalanceReads(reads: ServerThreadReads(pool: pool, metrics: RecordedStoreMetrics()))
        defer { reads.shutdown(timeoutSeconds: 5) }

        let answers = Monitor<[String]>([])
        let started = ContinuousClock.now
        let submitted = runOnThreads(40, timeoutSeconds: 30) { index in
            reads.submit(UserID("user-\(index)")!) { result in
                let answer: String
                switch result {
                case .success: answer = "balances"
                case .failure(let error): answer = String(describing: error)
                }
                answers.withLock { $0.append(answer) }
                answers.broadcast()
            }
        }
        #expect(submitted)
        let all = answers.wait(until: .now + .seconds(30)) { $0.count == 40 }
        let elapsed = ContinuousClock.now - started
        #expect(all)
        #expect(answers.withLock { $0 } == Array(repeating: String(describing: WalletError.databaseUnavailable), count: 40))
        #expect(elapsed < .seconds(10))
        #expect(silent.accepted <= 3)
    }
}

/// A TCP listener that accepts connections and never reads or writes.
final class SilentListener: Sendable {
    /// A pool of four connections to this listener.
    func pool() -> ConnectionPool {
        var connection = Connection.Options(conninfo: "host=127.0.0.1 port=\(port) dbname=wallet user=wallet")
        connection.connectTimeoutSeconds = 30
        var configuration = ConnectionPool.Configuration(connection: connection)
        configuration.maximumConnections = 4
        return ConnectionPool(configuration: configuration, logger: Logger(label: "test", level: .error, sink: .discard))
    }

    let port: UInt16
    private let descriptor: Int32
    private let acceptedCount = Atomic<Int>(0)
    private let stopping = Atomic<Bool>(false)
    private let finished = DispatchSemaphore(value: 0)

    var accepted: Int { acceptedCount.load(ordering: .acquiring) }

    init() throws {
        let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard descriptor >= 0 else { throw POSIXError(.EIO) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = 0
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(descriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        guard bound == 0, listen(descriptor, 64) == 0 else { throw POSIXError(.EADDRINUSE) }
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(descriptor, $0, &length) }
        }
        self.descriptor = descriptor
        port = UInt16(bigEndian: address.sin_port)
        let thread = Thread { [self] in acceptUntilStopped() }
        thread.start()
    }

    func stop() {
        stopping.store(true, ordering: .releasing)
        _ = finished.wait(timeout: .now() + 5)
        close(descriptor)
    }

    private func acceptUntilStopped() {
        var held: [Int32] = []
        while !stopping.load(ordering: .acquiring) {
            var poller = pollfd(fd: descriptor, events: Int16(POLLIN), revents: 0)
            guard poll(&poller, 1, 50) > 0 else { continue }
            let client = accept(descriptor, nil, nil)
            if client >= 0 {
                held.append(client)
                acceptedCount.add(1, ordering: .releasing)
            }
        }
        for client in held { close(client) }
        finished.signal()
    }
}
