import Foundation
import Locking
import Testing

@Suite(.timeLimit(.minutes(1)))
struct MonitorTests {
    /// Eight threads add to one counter: no increment is lost.
    @Test func lockedSerialisesUpdates() {
        let counter = Locked(0)
        let done = Monitor(0)
        for _ in 0..<8 {
            Thread {
                for _ in 0..<10_000 { counter.withLock { $0 += 1 } }
                done.withLock { $0 += 1 }
                done.broadcast()
            }.start()
        }
        #expect(done.wait(until: .now + .seconds(30)) { $0 == 8 })
        #expect(counter.withLock { $0 } == 80_000)
    }

    @Test func aReadyConditionDoesNotWait() {
        let monitor = Monitor(true)
        let started = ContinuousClock.now
        #expect(monitor.wait(until: .now + .seconds(10)) { $0 })
        #expect(started.duration(to: .now) < .seconds(1))
    }

    /// Nobody changes the value: the wait ends at its deadline, not before
    /// and not much after, and says the condition did not hold.
    @Test func aWaitEndsAtItsDeadline() {
        let monitor = Monitor(false)
        let deadline = ContinuousClock.now + .milliseconds(200)
        let ready = monitor.wait(until: deadline) { $0 }
        #expect(!ready)
        #expect(ContinuousClock.now >= deadline)
        #expect(ContinuousClock.now < deadline + .seconds(2))
    }

    @Test func aPastDeadlineStillChecksOnce() {
        let monitor = Monitor(1)
        let ready = monitor.wait(until: .now - .seconds(1), for: { $0 == 1 }) { value, ready in
            value += 1
            return ready
        }
        #expect(ready)
        #expect(monitor.withLock { $0 } == 2)
    }

    /// A change and a broadcast wake the waiter long before its deadline,
    /// the change made once the waiter is waiting.
    @Test func aChangeWakesTheWaiter() {
        let monitor = Monitor(0)
        let checked = DispatchSemaphore(value: 0)
        Thread {
            // The waiter checks under the lock and holds it until it waits:
            // taking the lock after its first check is taking it once it waits.
            guard checked.wait(timeout: .now() + 20) == .success else { return }
            monitor.withLock { $0 = 7 }
            monitor.broadcast()
        }.start()
        let started = ContinuousClock.now
        var firstCheck = true
        let seen = monitor.wait(until: .now + .seconds(20), for: { value in
            if firstCheck {
                firstCheck = false
                checked.signal()
            }
            return value != 0
        }) { value, _ in value }
        #expect(seen == 7)
        #expect(started.duration(to: .now) < .seconds(10))
    }

    /// A deadline further off than one timed wait of the condition variable
    /// is still honoured: a change wakes the waiter.
    @Test func aFarDeadlineIsFine() {
        let monitor = Monitor(false)
        Thread {
            monitor.withLock { $0 = true }
            monitor.signal()
        }.start()
        #expect(monitor.wait(until: .now + .seconds(10 * 86_400)) { $0 })
    }
}
