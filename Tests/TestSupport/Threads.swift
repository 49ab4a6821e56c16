import Foundation

/// Runs `body(index)` on `count` dedicated threads at once and waits for all
/// of them, at most `timeoutSeconds`. Dispatch's shared pools cap concurrency
/// at the number of cores, which would hide the races these tests look for;
/// real threads do not.
/// Returns false if some thread was still running at the deadline.
@discardableResult
public func runOnThreads(_ count: Int, timeoutSeconds: Double = 60, _ body: @escaping @Sendable (Int) -> Void) -> Bool {
    let group = DispatchGroup()
    let start = DispatchSemaphore(value: 0)
    for index in 0..<count {
        group.enter()
        let thread = Thread {
            start.wait()
            body(index)
            group.leave()
        }
        thread.stackSize = 1 << 20
        thread.start()
    }
    // Release them together so they really overlap.
    for _ in 0..<count { start.signal() }
    return group.wait(timeout: .now() + timeoutSeconds) == .success
}

/// Polls `condition` until it holds, at most `seconds`. For a test that must
/// wait for state it cannot be told about (a lock wait, a closed socket, a
/// row); returns whether the condition held by the deadline. The one poll
/// interval the tests have: every other wait is woken by what it waits for.
public func waitFor(seconds: Double, _ condition: () -> Bool) -> Bool {
    let deadline = Date(timeIntervalSinceNow: seconds)
    while Date() < deadline {
        if condition() { return true }
        // The poll's interval, not a guess that something has happened: the
        // condition is looked at again after it.
        Thread.sleep(forTimeInterval: 0.02)
    }
    return condition()
}
