import Foundation
package import Locking
package import Logging
package import ServiceSupport
package import WalletStore

/// Expires holds past their time, then coins past their lot's expiry, every
/// few seconds. Nothing depends on it for correctness (every write expires
/// its wallets' due holds and lots first, and reads count neither); it
/// keeps `held`, balances, hold rows and lots current for reports, admins
/// and the events a game server follows.
///
/// When it looks is the service's clock; which holds are due is
/// PostgreSQL's, the clock every write and read of a hold goes by, so the
/// instances of a service never disagree about it.
package final class HoldSweeper: Sendable {
    private let ledger: Ledger
    private let readiness: Readiness
    private let intervalSeconds: Double
    private let walletsMax: Int
    private let clock: any WorkClock
    private let logger: Logger
    private let state = Monitor(RunState())

    package init(ledger: Ledger, readiness: Readiness, intervalSeconds: Double, walletsMax: Int, clock: any WorkClock,
                 logger: Logger) {
        self.ledger = ledger
        self.readiness = readiness
        self.intervalSeconds = intervalSeconds
        self.walletsMax = walletsMax
        self.clock = clock
        self.logger = logger
    }

    package func start() {
        state.startThread(name: "wallet-holds") { [self] stopping in
            while !stopping() {
                if readiness.isSchemaReady {
                    do {
                        let expired = try ledger.expireHolds(wallets: walletsMax)
                        if expired > 0 { logger.info("holds expired", ["holds.expired": String(expired)]) }
                        let coins = try ledger.expireLots(wallets: walletsMax)
                        if coins > 0 { logger.info("coins expired", ["coins.expired": String(coins)]) }
                    } catch {
                        logger.warning("holds could not be expired", ["error": String(reflecting: error)])
                    }
                }
                state.pause(seconds: intervalSeconds, on: clock)
            }
        }
    }

    package func stop() {
        state.stopThread()
    }
}
