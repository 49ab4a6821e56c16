package import AppStore
package import GooglePlay
package import Locking
package import Logging
package import ServiceSupport
package import WalletStore

/// Every background thread of `serve`: upkeep (the schema, then the
/// idempotency, event and delivery purges), the stores' scheduled sweeps,
/// the outbox sender, hold expiry, webhook delivery and the ledger
/// verifier, each started and stopped together.
package final class BackgroundWorkers: Sendable {
    /// What the workers are built from, read by the composition root from
    /// its configuration, which checked every value.
    package struct Settings: Sendable {
        package var migrate: Bool
        package var purge: Upkeep.Purge
        package var holdSweepIntervalSeconds: Double
        package var holdSweepWalletsMax: Int
        /// Minutes between App Store notification-history sweeps; 0 is off.
        package var reconcileIntervalMinutes: Int
        /// The App Store environments whose history is swept.
        package var appleEnvironments: [Environment]
        /// Whether consumption answers are sent to Apple, and what they ask for.
        package var consumptionConsent: Bool
        package var refundPreference: ConsumptionAnswer.Preference
        /// Minutes between Google Play voided-purchases sweeps; 0 is off.
        package var voidedPollMinutes: Int
        package var webhooks: WebhookSender.Settings
        /// Seconds between the ledger verifier's checks; 0 is off.
        package var verifyIntervalSeconds: Int

        package init(migrate: Bool, purge: Upkeep.Purge, holdSweepIntervalSeconds: Double, holdSweepWalletsMax: Int,
                     reconcileIntervalMinutes: Int, appleEnvironments: [Environment], consumptionConsent: Bool,
                     refundPreference: ConsumptionAnswer.Preference, voidedPollMinutes: Int,
                     webhooks: WebhookSender.Settings, verifyIntervalSeconds: Int) {
            self.verifyIntervalSeconds = verifyIntervalSeconds
            self.webhooks = webhooks
            self.migrate = migrate
            self.purge = purge
            self.holdSweepIntervalSeconds = holdSweepIntervalSeconds
            self.holdSweepWalletsMax = holdSweepWalletsMax
            self.reconcileIntervalMinutes = reconcileIntervalMinutes
            self.appleEnvironments = appleEnvironments
            self.consumptionConsent = consumptionConsent
            self.refundPreference = refundPreference
            self.voidedPollMinutes = voidedPollMinutes
        }
    }

    /// Notification-history sweeps, when the API is set up and the interval is not 0.
    private let reconcile: ReconcileSchedule?
    /// Google Play voided-purchases sweeps, when Google Play is set up and the interval is not 0.
    private let voidedSweep: ReconcileSchedule?
    /// The outbox's calls: consumption answers when the operator consents,
    /// Google Play consumes when Google Play is set up.
    private let outbox: OutboxSender?
    private let holdSweeper: HoldSweeper
    private let webhooks: WebhookSender
    private let upkeep: Upkeep
    /// The ledger verifier, when its interval is not 0.
    private let verifier: LedgerVerifier?

    /// A store's client is nil when that store is not set up. Schedules and
    /// pauses run on `clock`. `afterSchema` is what must be read once the
    /// schema is up, before the service counts as ready.
    package init(ledger: Ledger, readiness: Readiness, metrics: Metrics, notifications: NotificationProcessor,
                 serverAPI: ServerAPIClient?, googlePlay: PlayClient?, googleVoids: GooglePlayVoids?, settings: Settings,
                 clock: any WorkClock, logger: Logger, afterSchema: @escaping @Sendable () throws -> Void) {
        if let serverAPI, settings.reconcileIntervalMinutes > 0 {
            let reconciler = Reconciler(client: serverAPI, notifications: notifications, logger: logger)
            reconcile = ReconcileSchedule(
                name: "notification reconciliation", threadName: "wallet-history",
                sweeps: reconciler.sweeps(settings.appleEnvironments), lockKey: Ledger.reconcileLockKey, ledger: ledger,
                intervalMinutes: settings.reconcileIntervalMinutes, readiness: readiness, clock: clock, logger: logger)
        } else {
            reconcile = nil
        }
        var outboxHandlers: [OutboxSender.Handler] = []
        if let serverAPI, settings.consumptionConsent {
            outboxHandlers.append(.appStoreConsumption(client: serverAPI, preference: settings.refundPreference,
                                                       metrics: metrics))
        }
        if let googlePlay {
            outboxHandlers.append(.googlePlayConsume(client: googlePlay, metrics: metrics))
        }
        outbox = outboxHandlers.isEmpty ? nil
            : OutboxSender(ledger: ledger, handlers: outboxHandlers, readiness: readiness, clock: clock, logger: logger)
        if let googleVoids, settings.voidedPollMinutes > 0 {
            voidedSweep = ReconcileSchedule(
                name: "voided purchases sweep", threadName: "wallet-voids",
                sweeps: [VoidedPurchasesSweep(voids: googleVoids)], lockKey: Ledger.voidedSweepLockKey, ledger: ledger,
                intervalMinutes: settings.voidedPollMinutes, readiness: readiness, clock: clock, logger: logger)
        } else {
            voidedSweep = nil
        }
        holdSweeper = HoldSweeper(ledger: ledger, readiness: readiness, intervalSeconds: settings.holdSweepIntervalSeconds,
                                  walletsMax: settings.holdSweepWalletsMax, clock: clock, logger: logger)
        webhooks = WebhookSender(ledger: ledger, settings: settings.webhooks, readiness: readiness, metrics: metrics,
                                 clock: clock, logger: logger)
        upkeep = Upkeep(ledger: ledger, readiness: readiness, migrate: settings.migrate, purge: settings.purge,
                        metrics: metrics, clock: clock, logger: logger, afterSchema: afterSchema)
        verifier = settings.verifyIntervalSeconds == 0 ? nil
            : LedgerVerifier(ledger: ledger, readiness: readiness, intervalSeconds: Double(settings.verifyIntervalSeconds),
                             metrics: metrics, clock: clock, logger: logger)
    }

    package func start() {
        upkeep.start()
        reconcile?.start()
        voidedSweep?.start()
        outbox?.start()
        holdSweeper.start()
        webhooks.start()
        verifier?.start()
    }

    /// Stops every thread and waits for each, at most 10 seconds.
    package func stop() {
        reconcile?.stop()
        voidedSweep?.stop()
        outbox?.stop()
        holdSweeper.stop()
        webhooks.stop()
        verifier?.stop()
        upkeep.stop()
    }
}
