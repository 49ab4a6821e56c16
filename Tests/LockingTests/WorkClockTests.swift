import Foundation
import Locking
import Testing
import TestSupport

/// The clocks background work waits on: the real one really waits; the
/// manual one ends a wait when the test moves it past the wait's deadline,
/// or when what the waiter waits for happens, and never later than the real
/// clock would.
@Suite(.timeLimit(.minutes(1)))
struct WorkClockTests {
    @Test func theSystemClockPausesForRealAndWakesOnAChange() {
        let clock = SystemClock()
        let started = ContinuousClock.now
        clock.pause(seconds: 0.2)
        #expect(started.duration(to: .now) >= .milliseconds(200))

        // A change ends a wait long before its deadline.
        let monitor = Monitor(false)
        let waiter = Signal()
        let seen = Locked<Bool?>(nil)
        Thread {
            seen.withLock { $0 = clock.wait(on: monitor, until: clock.now + .seconds(3_600)) { $0 } }
            waiter.fire()
        }.start()
        monitor.withLock { $0 = true }
        monitor.broadcast()
        #expect(waiter.wait(seconds: 10))
        #expect(seen.withLock { $0 } == true)
    }

    /// A worker's hour-long pause ends as soon as the clock is moved an hour,
    /// and not when it is moved less.
    @Test func advancingPastAWaitEndsItAtOnce() {
        let clock = ManualClock()
        let monitor = Monitor(false)
        let ended = Signal()
        Thread {
            Thread.nameCurrent("clock-worker")
            _ = clock.wait(on: monitor, until: clock.now + .seconds(3_600)) { $0 }
            ended.fire()
        }.start()
        let waits = clock.waitUntilWaiting(thread: "clock-worker", seconds: 10)
        #expect(waits == 1)
        #expect(clock.lastWaitLength(thread: "clock-worker").map { $0 > .seconds(3_599) } == true)

        clock.advance(by: .seconds(3_000))
        // Still waiting: its deadline is still ahead.
        #expect(!ended.wait(seconds: 0))
        #expect(clock.waitUntilWaiting(thread: "clock-worker", seconds: 10) == 1)

        let started = ContinuousClock.now
        clock.advance(by: .seconds(600))
        #expect(ended.wait(seconds: 10))
        #expect(started.duration(to: .now) < .seconds(5))
        #expect(clock.offset == .seconds(3_600))
    }

    /// What the waiter waits for ends the wait too, whatever the clock.
    @Test func aChangeEndsAManualWait() {
        let clock = ManualClock(movesWithRealTime: false)
        let monitor = Monitor(0)
        let result = Locked<Bool?>(nil)
        let ended = Signal()
        Thread {
            Thread.nameCurrent("clock-change")
            result.withLock { $0 = clock.wait(on: monitor, until: clock.now + .seconds(3_600)) { $0 == 7 } }
            ended.fire()
        }.start()
        #expect(clock.waitUntilWaiting(thread: "clock-change", seconds: 10) == 1)
        monitor.withLock { $0 = 7 }
        monitor.broadcast()
        #expect(ended.wait(seconds: 10))
        #expect(result.withLock { $0 } == true)
        #expect(clock.offset == .zero)
    }

    /// Standing still, the clock moves only when told; a wait nobody moves
    /// it past still ends after as much real time as it was long.
    @Test func aClockThatStandsStillMovesOnlyWhenTold() {
        let clock = ManualClock(movesWithRealTime: false)
        let before = clock.now
        let date = clock.date
        clock.advance(by: .milliseconds(1_500))
        #expect(clock.now == before + .milliseconds(1_500))
        #expect(abs(clock.date.timeIntervalSince(date) - 1.5) < 0.000_001)

        let started = ContinuousClock.now
        #expect(!clock.wait(on: Monitor(false), until: clock.now + .milliseconds(200)) { $0 })
        #expect(started.duration(to: .now) >= .milliseconds(200))
        #expect(clock.now == before + .milliseconds(1_500))
    }

    /// For one caller's backoff: each pause moves the clock by itself, at
    /// once, and is listed.
    @Test func aClockThatAdvancesToEachWaitListsThePauses() {
        let clock = ManualClock(movesWithRealTime: false, advancingToEachWait: true)
        let before = clock.now
        let started = ContinuousClock.now
        for seconds in [0.25, 0.5, 1, 2, 4, 4] { clock.pause(seconds: seconds) }
        #expect(started.duration(to: .now) < .seconds(5))
        #expect(clock.waitsRequested == [.milliseconds(250), .milliseconds(500), .seconds(1), .seconds(2), .seconds(4),
                                         .seconds(4)])
        #expect(clock.now == before + .milliseconds(11_750))
    }
}

/// A one-shot event with a deadline on its wait.
final class Signal: Sendable {
    private let fired = Monitor(false)

    func fire() {
        fired.withLock { $0 = true }
        fired.broadcast()
    }

    /// Whether it fired within `seconds`.
    func wait(seconds: Double) -> Bool {
        fired.wait(until: .now + .seconds(seconds)) { $0 }
    }
}
