import Dispatch
import Foundation
import HTTPServer
import Locking
import Logging
import TestSupport

/// Keeps every log line, so tests can check what was (and was not) logged,
/// and wait for a line.
final class LogCapture: Sendable {
    private let lines = Monitor<[String]>([])

    var sink: Logger.Sink {
        Logger.Sink { line in
            self.lines.withLock { $0.append(line) }
            self.lines.broadcast()
        }
    }

    var text: String {
        lines.withLock { $0.joined() }
    }

    /// Waits until a line holding `text` is logged, at most `seconds`.
    func waitForLine(containing text: String, seconds: Double) -> Bool {
        lines.wait(until: .now + .seconds(seconds)) { $0.contains { $0.contains(text) } }
    }
}

/// A server on an ephemeral loopback port with two threads, as small as the
/// machine it must prove things on.
struct TestServer {
    let server: Server
    let log = LogCapture()

    init(
        configure: (inout Server.Configuration) -> Void = { _ in },
        observer: (@Sendable (CompletedRequest) -> Void)? = nil,
        routes: (Router) -> Void
    ) throws {
        var configuration = Self.configuration(port: 0)
        configure(&configuration)
        let router = Router()
        routes(router)
        server = Server(
            configuration: configuration, router: router,
            logger: Logger(label: "http-test", level: .debug, sink: log.sink), observer: observer)
        try server.start()
    }

    var port: UInt16 { server.port }

    /// Two threads and the service's default limits, on loopback.
    static func configuration(port: UInt16) -> Server.Configuration {
        Server.Configuration(
            host: "127.0.0.1", port: port, threads: 2, maxBodyBytes: 1 << 20, maxHeaderBytes: 16 << 10, maxConnections: 1024,
            idleTimeoutSeconds: 30, requestTimeoutSeconds: 10, shutdownGraceSeconds: 5)
    }

    func client(timeoutSeconds: Double = 5) throws -> HTTPTestClient {
        try HTTPTestClient(port: port, timeoutSeconds: timeoutSeconds)
    }
}

/// A one-shot signal between threads, with a deadline on every wait.
final class Signal: Sendable {
    private let fired = Monitor(false)

    func fire() {
        fired.withLock { $0 = true }
        fired.broadcast()
    }

    func wait(seconds: Double) -> Bool {
        fired.wait(until: .now + .seconds(seconds)) { $0 }
    }
}

extension Locked {
    /// The value now, for values handed between threads in a test.
    var current: State { withLock { $0 } }
}

/// Runs `body` on a new thread, for calls that block (shutdown).
///
/// Not on Dispatch's global queues: on Linux the test functions themselves run
/// on those few threads, and blocking them would delay every other block.
func onAnotherThread(_ body: @escaping @Sendable () -> Void) {
    Thread(block: body).start()
}

/// Where handlers under test send their deferred answers from. A serial queue
/// may get its own thread when the global ones are busy with blocking test code.
let answerQueue = DispatchQueue(label: "http-test.answers")
