import Foundation
import Locking

/// Keeps flowNO-only credits from being a way to scan Apple's transaction
/// ids: a flowNO Apple does not know is remembered for a minute (answered
/// again without asking), and each user may cause at most
/// `notFoundPerUserMax` such lookups a minute.
///
/// Both tables are bounded; past the bound, entries that have expired are
/// dropped, then the oldest.
final class TransactionLookups: Sendable {
    static let windowSeconds = 60.0
    static let notFoundPerUserMax = 10
    static let entriesMax = 100_000

    private struct State: Sendable {
        /// flowNO → when Apple said it does not know it.
        var notFound: [String: ContinuousClock.Instant] = [:]
        /// user → when each of their recent not-found lookups was answered.
        var misses: [String: [ContinuousClock.Instant]] = [:]
    }

    enum Admission: Equatable {
        /// Ask Apple.
        case ask
        /// Apple said within the minute that it does not know this flowNO.
        case knownNotFound
        /// The user used up their not-found lookups; retry after this many seconds.
        case limited(retryAfterSeconds: Int)
    }

    private let state = Locked(State())

    /// Whether `flowNo` may be looked up for `userID` now.
    func admit(flowNo: String, userID: String, now: ContinuousClock.Instant = .now) -> Admission {
        state.withLock { state in
            if let at = state.notFound[flowNo], now < at + .seconds(Self.windowSeconds) { return .knownNotFound }
            let recent = (state.misses[userID] ?? []).filter { now < $0 + .seconds(Self.windowSeconds) }
            state.misses[userID] = recent.isEmpty ? nil : recent
            if recent.count >= Self.notFoundPerUserMax, let oldest = recent.first {
                let wait = now.duration(to: oldest + .seconds(Self.windowSeconds))
                let seconds = Int(wait.components.seconds) + (wait.components.attoseconds > 0 ? 1 : 0)
                return .limited(retryAfterSeconds: max(1, seconds))
            }
            return .ask
        }
    }

    /// Records that Apple does not know `flowNo`, looked up for `userID`.
    func recordNotFound(flowNo: String, userID: String, now: ContinuousClock.Instant = .now) {
        state.withLock { state in
            if state.notFound.count >= Self.entriesMax { Self.prune(&state.notFound, now: now) }
            state.notFound[flowNo] = now
            if state.misses[userID] == nil, state.misses.count >= Self.entriesMax {
                state.misses = state.misses.filter { _, times in times.contains { now < $0 + .seconds(Self.windowSeconds) } }
                if state.misses.count >= Self.entriesMax, let any = state.misses.keys.first { state.misses[any] = nil }
            }
            state.misses[userID, default: []].append(now)
        }
    }

    private static func prune(_ table: inout [String: ContinuousClock.Instant], now: ContinuousClock.Instant) {
        table = table.filter { now < $0.value + .seconds(windowSeconds) }
        guard table.count >= entriesMax else { return }
        // Still full of fresh entries: keep the newest three quarters.
        let kept = table.sorted { $0.value > $1.value }.prefix(entriesMax * 3 / 4)
        table = Dictionary(uniqueKeysWithValues: kept.map { ($0.key, $0.value) })
    }
}
