import Foundation
import Locking

/// Keeps flowNO-only credits from being a way to scan Apple's transaction
/// ids: a flowNO Apple does not know is remembered for a minute (answered
/// again without asking), and each user may cause at most
/// `notFoundPerUserMax` such lookups a minute.
///
/// Both tables are bounded caches of `entriesMax` entries; an entry leaves
/// when its minute is over, or earlier as the least recently used when a new
/// one needs its room.
final class TransactionLookups: Sendable {
    static let windowSeconds = 60.0
    static let notFoundPerUserMax = 10
    /// flowNOs, and users, remembered at most by each table: a whole minute
    /// of not-found lookups at up to 1,600 a second.
    static let entriesMax = 100_000

    enum Admission: Equatable {
        /// Ask Apple.
        case ask
        /// Apple said within the minute that it does not know this flowNO.
        case knownNotFound
        /// The user used up their not-found lookups; retry after this many seconds.
        case limited(retryAfterSeconds: Int)
    }

    /// flowNO → when Apple said it does not know it.
    private let notFound = BoundedCache<String, ContinuousClock.Instant>(
        entriesMax: entriesMax, expires: { $0 + .seconds(windowSeconds) })
    /// user → when each of their recent not-found lookups was answered,
    /// oldest first.
    private let misses = BoundedCache<String, [ContinuousClock.Instant]>(
        entriesMax: entriesMax, expires: { ($0.max() ?? .now) + .seconds(windowSeconds) })

    /// Whether `flowNo` may be looked up for `userID` now.
    func admit(flowNo: String, userID: String, now: ContinuousClock.Instant) -> Admission {
        if notFound.value(forKey: flowNo, now: now) != nil { return .knownNotFound }
        return misses.update(forKey: userID, now: now) { times in
            let recent = Self.recent(times, now: now)
            times = recent.isEmpty ? nil : recent
            if recent.count >= Self.notFoundPerUserMax, let oldest = recent.first {
                let wait = now.duration(to: oldest + .seconds(Self.windowSeconds))
                let seconds = Int(wait.components.seconds) + (wait.components.attoseconds > 0 ? 1 : 0)
                return .limited(retryAfterSeconds: max(1, seconds))
            }
            return .ask
        }
    }

    /// Records that Apple does not know `flowNo`, looked up for `userID`.
    func recordNotFound(flowNo: String, userID: String, now: ContinuousClock.Instant) {
        notFound.insert(now, forKey: flowNo)
        misses.update(forKey: userID, now: now) { times in times = Self.recent(times, now: now) + [now] }
    }

    /// The lookups still inside the window at `now`.
    private static func recent(_ times: [ContinuousClock.Instant]?, now: ContinuousClock.Instant) -> [ContinuousClock.Instant] {
        (times ?? []).filter { now < $0 + .seconds(windowSeconds) }
    }
}
