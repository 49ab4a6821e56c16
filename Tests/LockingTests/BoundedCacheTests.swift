import Foundation
@testable import Locking
import Testing

/// The one bounded cache: its bound, its one eviction rule, expiry, and its
/// structure under many threads.
@Suite(.timeLimit(.minutes(1)))
struct BoundedCacheTests {
    struct Expiring: Sendable, Equatable {
        var number: Int
        var expires: ContinuousClock.Instant
    }

    /// Far more keys than room, stored both ways: the count never passes the
    /// bound, and what is left is the most recent keys.
    @Test func theBoundIsNeverExceeded() {
        let cache = BoundedCache<Int, Int>(entriesMax: 16)
        var highest = 0
        for key in 0..<1_000 {
            if key.isMultiple(of: 2) {
                cache.insert(key, forKey: key)
            } else {
                cache.update(forKey: key) { $0 = key }
            }
            highest = max(highest, cache.count)
        }
        #expect(highest == 16)
        #expect(cache.keysLeastRecentFirst() == Array(984..<1_000))
        #expect(cache.value(forKey: 983) == nil)
        #expect(cache.value(forKey: 984) == 984)
        #expect(cache.invariantViolations() == [])
    }

    /// Reads, updates and stores all count as use; the least recently used
    /// entry is the one a new key pushes out, and only a new key does.
    @Test func theLeastRecentlyUsedEntryGoesFirst() {
        let cache = BoundedCache<String, Int>(entriesMax: 3)
        cache.insert(1, forKey: "a")
        cache.insert(2, forKey: "b")
        cache.insert(3, forKey: "c")
        #expect(cache.value(forKey: "a") == 1)
        #expect(cache.keysLeastRecentFirst() == ["b", "c", "a"])
        #expect(cache.value(forKey: "missing") == nil)
        #expect(cache.keysLeastRecentFirst() == ["b", "c", "a"], "a miss changes no place")

        cache.insert(4, forKey: "d")
        #expect(cache.keysLeastRecentFirst() == ["c", "a", "d"])
        #expect(cache.value(forKey: "b") == nil)

        cache.update(forKey: "c") { $0 = ($0 ?? 0) + 10 }
        #expect(cache.keysLeastRecentFirst() == ["a", "d", "c"])
        cache.insert(5, forKey: "e")
        #expect(cache.keysLeastRecentFirst() == ["d", "c", "e"])

        // Storing a key already held replaces its value and drops nothing.
        cache.insert(40, forKey: "d")
        #expect(cache.keysLeastRecentFirst() == ["c", "e", "d"])
        #expect(cache.value(forKey: "c") == 13)

        // Removing makes room; an update that leaves nothing stores nothing.
        #expect(cache.removeValue(forKey: "e") == 5)
        cache.update(forKey: "f") { $0 = nil }
        #expect(cache.keysLeastRecentFirst() == ["d", "c"])
        cache.insert(6, forKey: "g")
        cache.insert(7, forKey: "h")
        #expect(cache.keysLeastRecentFirst() == ["c", "g", "h"])
        cache.update(forKey: "g") { $0 = nil }
        #expect(cache.keysLeastRecentFirst() == ["c", "h"])
        cache.removeAll()
        #expect(cache.count == 0)
        #expect(cache.keysLeastRecentFirst() == [])
        #expect(cache.invariantViolations() == [])
    }

    /// An entry reads as absent from the instant its value names, and is
    /// removed when met; expiry does not change what a new key pushes out.
    @Test func expiredEntriesReadAsAbsent() {
        let start = ContinuousClock.now
        let cache = BoundedCache<String, Expiring>(entriesMax: 2, expires: { $0.expires })
        cache.insert(Expiring(number: 1, expires: start + .seconds(10)), forKey: "x")
        cache.insert(Expiring(number: 2, expires: start + .seconds(20)), forKey: "y")
        #expect(cache.value(forKey: "x", now: start + .seconds(9))?.number == 1)
        #expect(cache.value(forKey: "x", now: start + .seconds(10)) == nil)
        #expect(cache.count == 1, "the expired entry was removed when met")

        // An update sees an expired entry as absent, and stores afresh.
        let seen = cache.update(forKey: "y", now: start + .seconds(20)) { value -> Int? in
            defer { value = Expiring(number: 3, expires: start + .seconds(30)) }
            return value?.number
        }
        #expect(seen == nil)
        #expect(cache.value(forKey: "y", now: start + .seconds(29))?.number == 3)
        #expect(cache.removeValue(forKey: "y", now: start + .seconds(30)) == nil, "removed, but no longer live")
        #expect(cache.count == 0)

        // "p" has expired but was used last: a new key pushes out "q", the
        // least recently used, as it would any other time.
        cache.insert(Expiring(number: 4, expires: start + .seconds(1)), forKey: "p")
        cache.insert(Expiring(number: 5, expires: start + .seconds(100)), forKey: "q")
        #expect(cache.value(forKey: "p", now: start)?.number == 4)
        cache.insert(Expiring(number: 6, expires: start + .seconds(100)), forKey: "r")
        #expect(cache.keysLeastRecentFirst() == ["p", "r"])
        #expect(cache.value(forKey: "p", now: start + .seconds(50)) == nil)
        #expect(cache.keysLeastRecentFirst() == ["r"])
        #expect(cache.invariantViolations() == [])
    }

    /// Eight threads increment 32 counters through `update`, with room for
    /// all of them: no increment is lost.
    @Test func concurrentUpdatesOfTheSameKeysLoseNothing() {
        let cache = BoundedCache<Int, Int>(entriesMax: 64)
        let threads = WorkerThreads()
        threads.start(count: 8, name: "cache-counter") { thread in
            for step in 0..<5_000 {
                cache.update(forKey: (thread + step) % 32) { $0 = ($0 ?? 0) + 1 }
                if step.isMultiple(of: 7) { _ = cache.value(forKey: step % 32) }
            }
        }
        #expect(threads.wait(timeoutSeconds: 50))
        let total = (0..<32).reduce(0) { $0 + (cache.value(forKey: $1) ?? 0) }
        #expect(total == 40_000)
        #expect(cache.count == 32)
        #expect(cache.invariantViolations() == [])
    }

    /// Eight threads insert, update, read and remove 2,000 keys in a cache of
    /// 50, and each touches one shared key between any two of its other
    /// operations. The count never passes the bound, every value read is the
    /// one its key was given, the shared key is never pushed out (at most one
    /// new key per thread can come between two of its uses), and the list
    /// and the dictionary agree afterwards.
    @Test func manyThreadsUnderEvictionKeepEveryInvariant() {
        let entriesMax = 50
        let cache = BoundedCache<Int, Int>(entriesMax: entriesMax)
        let hot = -1
        cache.insert(hot * 7, forKey: hot)
        let problems = Locked<[String]>([])
        let threads = WorkerThreads()
        threads.start(count: 8, name: "cache-churn") { thread in
            var random = UInt64(thread + 1) &* 0x9E37_79B9_7F4A_7C15
            for step in 0..<20_000 {
                random ^= random << 13
                random ^= random >> 7
                random ^= random << 17
                let key = Int(random % 2_000)
                switch random % 4 {
                case 0: cache.insert(key * 7, forKey: key)
                case 1: cache.update(forKey: key) { $0 = key * 7 }
                case 2:
                    if let value = cache.value(forKey: key), value != key * 7 {
                        problems.withLock { $0.append("key \(key) read \(value)") }
                    }
                default: cache.removeValue(forKey: key)
                }
                if cache.value(forKey: hot) != hot * 7 {
                    problems.withLock { $0.append("the shared key was pushed out at step \(step)") }
                }
                if step.isMultiple(of: 100), cache.count > entriesMax {
                    problems.withLock { $0.append("\(cache.count) entries") }
                }
            }
        }
        #expect(threads.wait(timeoutSeconds: 50))
        #expect(problems.withLock { Array($0.prefix(5)) } == [])
        #expect(cache.count <= entriesMax)
        #expect(cache.value(forKey: hot) == hot * 7)
        #expect(cache.invariantViolations() == [])
    }
}
