package import HTTPServer
package import Locking
package import Logging
package import ServiceSupport
package import WalletStore

/// The support console as `serve` runs it: its routes on the service's
/// router, the few threads its pages read on, and the key its session
/// cookies are signed with.
package final class SupportConsole: Sendable {
    private let work: BlockingWork
    private let cookies = SessionCookies()
    private let ledger: Ledger

    /// Registers the console's routes on `router`; its pages read on
    /// `threads` threads, with at most `queueDepthMax` waiting.
    package init(router: Router, ledger: Ledger, readiness: Readiness, clock: any WorkClock, threads: Int, queueDepthMax: Int,
                 sessionMinutes: Int, cookieSecure: Bool, trustedProxies: TrustedProxies, requestTimeoutSeconds: Int,
                 logger: Logger) {
        self.ledger = ledger
        work = BlockingWork(threads: threads, queueDepthMax: queueDepthMax, name: "wallet-console")
        AdminConsole(ledger: ledger, readiness: readiness, work: work, cookies: cookies, sessionMinutes: sessionMinutes,
                     cookieSecure: cookieSecure, trustedProxies: trustedProxies, requestTimeoutSeconds: requestTimeoutSeconds,
                     clock: clock, logger: logger)
            .register(on: router)
    }

    /// Reads the cookie key, once the schema is up and before the service
    /// counts as ready: until then no cookie can be checked or issued.
    package func loadCookieKey(deadline: ContinuousClock.Instant) throws {
        cookies.load(try ledger.consoleCookieKey(deadline: deadline))
    }

    /// Refuses new page reads, lets queued ones finish, and waits for the
    /// threads, at most `timeoutSeconds`.
    package func stop(timeoutSeconds: Double) {
        work.stop(timeoutSeconds: timeoutSeconds)
    }
}
