import Foundation
import GooglePlay
import Testing
import TestSupport

/// A fake Google Play and a client of it, with every exchange the client
/// reports kept in order. The client's clock stands still until a pause
/// moves it: a retry's backoff takes no real time, and `clock` lists it.
struct PlayRig {
    let fake: FakeGooglePlay
    let client: PlayClient
    let clock = ManualClock(movesWithRealTime: false, advancingToEachWait: true)
    let observed = Observations()

    init(timeoutSeconds: Double = 5, account: ServiceAccount? = nil) throws {
        fake = try FakeGooglePlay()
        let observed = observed
        client = PlayClient(configuration: fake.configuration(timeoutSeconds: timeoutSeconds),
                            account: account ?? fake.account, clock: clock) { endpoint, status, _ in
            observed.append(endpoint, status)
        }
    }

    func stop() {
        fake.stop()
    }

    /// Requests that reached the API (not the token endpoint).
    var apiRequests: [FakeGooglePlay.Received] {
        fake.received(pathContaining: "/androidpublisher/")
    }
}

/// What an `observe` callback was told, from any thread.
final class Observations: @unchecked Sendable {
    struct Entry: Equatable {
        var endpoint: PlayClient.Endpoint
        var status: PlayClient.StatusClass
    }

    private let lock = NSLock()
    // Guarded by `lock`.
    private var entries: [Entry] = []

    func append(_ endpoint: PlayClient.Endpoint, _ status: PlayClient.StatusClass) {
        lock.withLock { entries.append(Entry(endpoint: endpoint, status: status)) }
    }

    var all: [Entry] {
        lock.withLock { entries }
    }

    func removeAll() {
        lock.withLock { entries.removeAll() }
    }
}

/// Seconds since `start`.
func secondsSince(_ start: ContinuousClock.Instant) -> Double {
    let elapsed = start.duration(to: .now)
    return Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
}

/// The thrown `PlayAPIError`, or nil when `body` succeeds. Any other error
/// is a test failure.
func playError(_ body: () throws -> Void) -> PlayAPIError? {
    do {
        try body()
        return nil
    } catch let error as PlayAPIError {
        return error
    } catch {
        Issue.record("not a PlayAPIError: \(error)")
        return nil
    }
}
