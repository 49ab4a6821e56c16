import Foundation
import Locking

#if canImport(Glibc)
import Glibc
#endif

/// Bounds the time a request may take to arrive, headers included.
///
/// libmicrohttpd's connection timeout is an inactivity timeout: every byte
/// resets it, so a client that sends one header byte every few seconds would
/// hold its connection slot for ever, and `maxConnections` such clients lock
/// everyone out. Here each open connection has a deadline by which its
/// current request must have arrived in full:
///
/// - a new connection: `requestTimeoutSeconds` after it was accepted;
/// - a kept-alive one: `idleTimeoutSeconds + requestTimeoutSeconds` after the
///   previous request ended, and `requestTimeoutSeconds` after the next
///   request line, whichever comes first;
/// - none while a request that arrived is being answered.
///
/// A sweeper thread wakes at the earliest deadline and shuts down the socket
/// of every connection past its own; libmicrohttpd then sees the connection
/// end and closes it. Once a request line has arrived, each deadline carries
/// `cutGraceSeconds` more, so that where the server's own checks can still
/// answer 408 (a client that stalls, or sends more body after the deadline)
/// they do first; what the sweeper cuts is a client that keeps sending
/// headers too slowly to finish. A new connection without a request line is
/// owed no 408 (there is no request to answer), so it is cut at its
/// deadline itself: an idle socket holds its slot no longer than the request
/// timeout.
///
/// Connections are known by libmicrohttpd's notifications. In 0.9.75 the
/// "closed" notification comes before the library closes the socket (see
/// `MHD_cleanup_connections`), and it takes this registry's lock, so a socket
/// is only ever shut down while it still belongs to the connection it was
/// registered for: a number reused for a later connection cannot be hit.
final class RequestDeadlines: Sendable {
    private struct Slot: Sendable {
        var socket: Int32
        /// When the request now arriving must be complete; nil while answering.
        var deadline: ContinuousClock.Instant?
        /// A new connection whose first request line has not arrived: its
        /// deadline has no grace yet.
        var awaitingFirstRequestLine = false
    }

    private struct State: Sendable {
        var slots: [Int: Slot] = [:]
        /// The sweeper sleeps until then, unless woken for an earlier deadline.
        var nextWake: ContinuousClock.Instant?
        /// A deadline earlier than `nextWake` was set: the sweeper looks again.
        var rescan = false
        var stopping = false
        var sweeperRunning = false
        var cutCount = 0
    }

    private let state = Monitor(State())
    private let requestTimeout: Duration
    /// The request timeout alone, for a new connection's request line.
    private let requestLineTimeout: Duration
    private let keepAliveAllowance: Duration
    /// libmicrohttpd enforces its connection limit; this is a second bound in
    /// case its count and ours ever differ.
    let slotsMax: Int

    static let cutGraceSeconds = 1

    init(requestTimeoutSeconds: Int, idleTimeoutSeconds: Int, maxConnections: Int) {
        requestTimeout = .seconds(requestTimeoutSeconds + Self.cutGraceSeconds)
        requestLineTimeout = .seconds(requestTimeoutSeconds)
        keepAliveAllowance = .seconds(idleTimeoutSeconds + requestTimeoutSeconds + Self.cutGraceSeconds)
        slotsMax = maxConnections * 2
    }

    /// Connections cut at their deadline so far.
    var cutCount: Int {
        locked { $0.cutCount }
    }

    func start() {
        locked { $0.sweeperRunning = true }
        let thread = Thread { [self] in
            Thread.nameCurrent("wallet-http-deadlines")
            sweep()
        }
        thread.start()
    }

    /// Stops the sweeper and waits for it, at most a second.
    func stop() {
        locked { $0.stopping = true }
        state.broadcast()
        state.wait(until: .now + .seconds(1)) { !$0.sweeperRunning }
    }

    /// A connection was accepted. False when the registry is full: the caller
    /// then shuts the socket down itself.
    func connectionStarted(_ key: Int, socket: Int32) -> Bool {
        let deadline = ContinuousClock.now + requestLineTimeout
        return locked { state in
            guard state.slots.count < slotsMax else { return false }
            state.slots[key] = Slot(socket: socket, deadline: deadline, awaitingFirstRequestLine: true)
            wakeIfEarlier(deadline, &state)
            return true
        }
    }

    /// The connection is closing; its socket is still open.
    func connectionClosed(_ key: Int) {
        locked { _ = $0.slots.removeValue(forKey: key) }
    }

    /// A request line arrived: the rest must follow within the request timeout.
    func requestLineArrived(_ key: Int) {
        let deadline = ContinuousClock.now + requestTimeout
        let grace = requestTimeout - requestLineTimeout
        locked { state in
            guard var slot = state.slots[key] else { return }
            // The request must still be complete by the accept's deadline,
            // now with the grace a request gets.
            let earlier = slot.deadline.map { slot.awaitingFirstRequestLine ? $0 + grace : $0 }
            slot.awaitingFirstRequestLine = false
            slot.deadline = min(earlier ?? deadline, deadline)
            state.slots[key] = slot
            wakeIfEarlier(deadline, &state)
        }
    }

    /// The request arrived in full (or was answered early): no deadline while
    /// it is being answered.
    func requestArrived(_ key: Int) {
        locked { state in
            state.slots[key]?.deadline = nil
        }
    }

    /// The request ended; on a kept-alive connection the next one may come.
    func requestEnded(_ key: Int) {
        let deadline = ContinuousClock.now + keepAliveAllowance
        locked { state in
            guard state.slots[key] != nil else { return }
            state.slots[key]?.deadline = deadline
            wakeIfEarlier(deadline, &state)
        }
    }

    private func wakeIfEarlier(_ deadline: ContinuousClock.Instant, _ state: inout State) {
        if state.nextWake.map({ deadline < $0 }) ?? true {
            state.nextWake = deadline
            state.rescan = true
            // Waking while holding the lock is allowed.
            self.state.broadcast()
        }
    }

    /// Cuts the connections past their deadline, and sleeps until the next
    /// deadline, a new earlier one, or `stop`.
    private func sweep() {
        var wakeAt = ContinuousClock.now
        while true {
            let next = state.wait(until: wakeAt, for: { $0.stopping || $0.rescan }) { state, _ -> ContinuousClock.Instant? in
                guard !state.stopping else {
                    state.sweeperRunning = false
                    return nil
                }
                state.rescan = false
                let now = ContinuousClock.now
                var earliest: ContinuousClock.Instant?
                for (key, slot) in state.slots {
                    guard let deadline = slot.deadline else { continue }
                    if deadline <= now {
                        // Under the lock: the connection cannot have closed its socket yet.
                        _ = Glibc.shutdown(slot.socket, Int32(SHUT_RDWR))
                        state.slots[key]?.deadline = nil
                        state.cutCount += 1
                    } else if earliest.map({ deadline < $0 }) ?? true {
                        earliest = deadline
                    }
                }
                state.nextWake = earliest
                // Without deadlines, sleep until one is set (which wakes it).
                return earliest ?? now + .seconds(3600)
            }
            guard let next else { break }
            wakeAt = next
        }
        state.broadcast()
    }

    private func locked<T>(_ body: (inout State) -> T) -> T {
        state.withLock(body)
    }
}
