import Locking
import Logging

/// Connections libmicrohttpd closed as soon as it accepted them, past the
/// per-address or the total connection limit.
///
/// Each is counted, but the log hears of them at most once per
/// `logIntervalSeconds`, with the number since the last line: a client
/// that reconnects as fast as it is refused would otherwise write a line
/// per attempt.
final class ConnectionRefusals: Sendable {
    static let logIntervalSeconds = 60

    private struct State: Sendable {
        var total = 0
        /// Refusals not yet in a log line.
        var unlogged = 0
        var lastLoggedAt: ContinuousClock.Instant?
    }

    private let state = Locked(State())
    private let logger: Logger

    init(logger: Logger) {
        self.logger = logger
    }

    /// Refusals since the server was made.
    var count: Int {
        state.withLock { $0.total }
    }

    func record() {
        let now = ContinuousClock.now
        let report = state.withLock { state -> (refused: Int, total: Int)? in
            state.total += 1
            state.unlogged += 1
            if let last = state.lastLoggedAt, now - last < .seconds(Self.logIntervalSeconds) { return nil }
            state.lastLoggedAt = now
            defer { state.unlogged = 0 }
            return (state.unlogged, state.total)
        }
        guard let report else { return }
        logger.warning(
            "connections refused at the connection limit (per client address, or in all)",
            ["http.refused": String(report.refused), "http.refused_total": String(report.total)])
    }
}
