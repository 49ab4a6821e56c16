import Foundation
package import Locking
package import Logging
package import ServiceSupport
package import WalletStore

/// Background work on one thread: bring the schema up (retrying with
/// backoff while the database is unreachable), then advance the console's
/// rollups every few seconds, and on the purge interval purge expired
/// idempotency records, events and unclaimed purchases past their
/// retention, each in bounded steps, and read how
/// many purchases wait unclaimed and how the database's WAL archiving
/// stands, for /metrics.
package final class Upkeep: Sendable {
    /// Which idempotency records and events go, and how much of them at a time.
    package struct Purge: Sendable {
        package var retentionHours: Int
        package var eventRetentionDays: Int
        package var unclaimedRetentionDays: Int
        package var intervalSeconds: Double
        package var roundRowsMax: Int
        package var roundsMax: Int

        package init(retentionHours: Int, eventRetentionDays: Int, unclaimedRetentionDays: Int, intervalSeconds: Double,
                     roundRowsMax: Int, roundsMax: Int) {
            self.retentionHours = retentionHours
            self.eventRetentionDays = eventRetentionDays
            self.unclaimedRetentionDays = unclaimedRetentionDays
            self.intervalSeconds = intervalSeconds
            self.roundRowsMax = roundRowsMax
            self.roundsMax = roundsMax
        }
    }

    private let ledger: Ledger
    private let readiness: Readiness
    private let migrate: Bool
    private let purge: Purge
    private let metrics: Metrics
    private let clock: any WorkClock
    private let logger: Logger
    /// What must be read from the database once the schema is up, before
    /// the service counts as ready (the console's cookie key).
    private let afterSchema: @Sendable () throws -> Void
    private let state = Monitor(RunState())

    package init(ledger: Ledger, readiness: Readiness, migrate: Bool, purge: Purge, metrics: Metrics, clock: any WorkClock,
                 logger: Logger, afterSchema: @escaping @Sendable () throws -> Void) {
        self.ledger = ledger
        self.readiness = readiness
        self.migrate = migrate
        self.purge = purge
        self.metrics = metrics
        self.clock = clock
        self.logger = logger
        self.afterSchema = afterSchema
    }

    package func start() {
        state.startThread(name: "wallet-upkeep") { [self] stopping in
            bringSchemaUp(stopping)
            var purgeDue = clock.now
            while !stopping() {
                if clock.now >= purgeDue {
                    purgeExpired(stopping)
                    purgeDue = clock.now + .seconds(purge.intervalSeconds)
                } else if readiness.isSchemaReady {
                    logRolledUp(rollUpConsole(stopping))
                }
                state.pause(seconds: min(Self.rollupIntervalSeconds, purge.intervalSeconds), on: clock)
            }
        }
    }

    /// Stops the thread and waits for it, at most 10 seconds.
    package func stop() {
        state.stopThread()
    }

    private func bringSchemaUp(_ stopping: () -> Bool) {
        var backoffSeconds = 0.25
        while !stopping() {
            do {
                try ledger.bringSchemaUp(migrate: migrate)
                try afterSchema()
                readiness.markSchemaReady()
                return
            } catch {
                logger.warning("database not ready; retrying", ["error": String(reflecting: error),
                                                                "retry.seconds": String(backoffSeconds)])
            }
            state.pause(seconds: backoffSeconds, on: clock)
            backoffSeconds = min(backoffSeconds * 2, 5)
        }
    }

    private func purgeExpired(_ stopping: () -> Bool) {
        guard readiness.isSchemaReady else { return }
        // First, so that a long purge never delays it.
        if let archive = try? ledger.walArchiveStatus() { metrics.setWALArchive(archive) }
        // Before the event purge, which never passes the rollups' watermark.
        logRolledUp(rollUpConsole(stopping))
        let keys = purgeInRounds(stopping) {
            try ledger.purgeIdempotencyKeys(olderThanHours: purge.retentionHours, limit: purge.roundRowsMax)
        }
        if keys > 0 { logger.info("idempotency records purged", ["purge.rows": String(keys)]) }
        let events = purgeInRounds(stopping) {
            try ledger.purgeEvents(olderThanDays: purge.eventRetentionDays, limit: purge.roundRowsMax)
        }
        if events > 0 { logger.info("events purged", ["purge.rows": String(events)]) }
        let deliveries = purgeInRounds(stopping) {
            try ledger.purgeWebhookDeliveries(olderThanDays: purge.eventRetentionDays, limit: purge.roundRowsMax)
        }
        if deliveries > 0 { logger.info("webhook deliveries purged", ["purge.rows": String(deliveries)]) }
        let unclaimed = purgeInRounds(stopping) {
            try ledger.purgeUnclaimedPurchases(olderThanDays: purge.unclaimedRetentionDays, limit: purge.roundRowsMax)
        }
        if unclaimed > 0 { logger.warning("unclaimed purchases deleted after their retention", ["purge.rows": String(unclaimed)]) }
        if let waiting = try? ledger.unclaimedPurchases() { metrics.setUnclaimed(waiting) }
    }

    /// How often the console's rollups catch up between purges: the
    /// overview adds every event above their watermark itself, so at a few
    /// thousand writes a second a minute's wait would leave it a tail of
    /// hundreds of thousands of rows to read on every view.
    static let rollupIntervalSeconds = 5.0

    private func logRolledUp(_ rolled: Int) {
        if rolled > 0 { logger.info("console rollups advanced", ["rollup.events": String(rolled)]) }
    }

    /// Steps of the console's rollup job until one takes less than a full
    /// step, at most `roundsMax`; returns how many events they took. What
    /// is left is the console's tail until the next run.
    private func rollUpConsole(_ stopping: () -> Bool) -> Int {
        var total = 0
        for _ in 0..<purge.roundsMax {
            guard !stopping() else { break }
            do {
                let taken = try ledger.rollUpConsole()
                total += taken
                if taken < Ledger.consoleRollupStepEventsMax { break }
            } catch {
                logger.warning("console rollup step failed", ["error": String(reflecting: error)])
                break
            }
        }
        return total
    }

    /// Runs `round` until it deletes less than a full round, at most
    /// `roundsMax` times; returns how many rows went.
    private func purgeInRounds(_ stopping: () -> Bool, _ round: () throws -> Int) -> Int {
        var total = 0
        for _ in 0..<purge.roundsMax {
            guard !stopping() else { break }
            let deleted = (try? round()) ?? 0
            total += deleted
            if deleted < purge.roundRowsMax { break }
        }
        return total
    }
}
