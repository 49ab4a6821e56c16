import Foundation
package import Locking

/// A background thread's run state: started, asked to stop, finished.
package struct RunState: Sendable {
    package var stopping = false
    package var running = false

    package init() {}
}

extension Monitor where State == RunState {
    /// Starts one thread running `body`, which should return soon after its
    /// argument answers true.
    package func startThread(name: String, _ body: @escaping @Sendable (_ stopping: () -> Bool) -> Void) {
        withLock { $0.running = true }
        let thread = Thread { [self] in
            Thread.nameCurrent(name)
            body { self.withLock { $0.stopping } }
            withLock { $0.running = false }
            broadcast()
        }
        thread.start()
    }

    /// Asks the thread to stop and waits for it, at most 10 seconds.
    package func stopThread() {
        withLock { $0.stopping = true }
        broadcast()
        wait(until: .now + .seconds(10)) { !$0.running }
    }

    /// Pauses until `clock` has moved on by `seconds`, or until the thread
    /// is asked to stop.
    package func pause(seconds: Double, on clock: any WorkClock) {
        _ = clock.wait(on: self, until: clock.now + .seconds(max(0, seconds))) { $0.stopping }
    }
}
