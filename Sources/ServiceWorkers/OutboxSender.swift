package import AppStore
import Foundation
package import GooglePlay
import JSON
package import Locking
package import Logging
package import ServiceSupport
import WalletCore
package import WalletStore

/// Sends what the outbox holds, off every request path, on one thread:
/// each due row is leased, its call made by its kind's handler from the
/// ledger as it is now, and the attempt recorded. A failure the store may
/// get over is retried with a pause doubling from 5 s to 30 minutes, within
/// the row's window (Apple's 12 hours for a consumption answer, the 3 days
/// before Google refunds an unconsumed purchase); a refusal, or the end of
/// the window, fails the row for good.
///
/// When a row is due is the service's clock, which both sets a retry's time
/// and waits for it; a test moves that clock instead of waiting.
package final class OutboxSender: Sendable {
    /// How one kind of row is sent.
    package struct Handler: Sendable {
        package var kind: OutboxKind
        /// The longest one call takes, retries included.
        package var timeoutSeconds: Double
        package var send: @Sendable (LedgerStore.OutboxTask) -> Attempt
        /// Counts what became of an attempt: sent, retried or failed.
        package var count: @Sendable (Metrics.ConsumptionOutcome) -> Void
    }

    /// One call's result, with the body sent when there is one.
    package enum Attempt: Sendable, Equatable {
        case sent(body: String?)
        /// The store may get over it: tried again later.
        case retry(String, body: String?)
        /// The store refused it for good.
        case refused(String, body: String?)
    }

    package static let pollSeconds = 2.0
    package static let batchMax = 20
    package static let firstRetrySeconds = 5
    package static let retrySecondsMax = 1_800

    private let ledger: Ledger
    private let handlers: [OutboxKind: Handler]
    private let readiness: Readiness
    private let clock: any WorkClock
    private let logger: Logger
    private let state = Monitor(RunState())

    package init(ledger: Ledger, handlers: [Handler], readiness: Readiness, clock: any WorkClock, logger: Logger) {
        self.ledger = ledger
        self.handlers = Dictionary(uniqueKeysWithValues: handlers.map { ($0.kind, $0) })
        self.readiness = readiness
        self.clock = clock
        self.logger = logger
    }

    package func start() {
        state.startThread(name: "wallet-outbox") { [self] stopping in
            while !stopping() {
                if readiness.isSchemaReady { sendDue() }
                state.pause(seconds: Self.pollSeconds, on: clock)
            }
        }
    }

    package func stop() {
        state.stopThread()
    }

    private func sendDue() {
        let tasks: [LedgerStore.OutboxTask]
        do {
            // Sent one after another: the lease outlasts every call of the
            // batch, so no other instance takes a row this one still holds.
            let longest = handlers.values.map(\.timeoutSeconds).max() ?? 10
            tasks = try ledger.claimOutbox(Array(handlers.keys), limit: Self.batchMax,
                                           leaseSeconds: Int(longest.rounded(.up)) * Self.batchMax + 60,
                                           now: clock.date)
        } catch {
            logger.warning("the outbox could not be read", ["error": String(reflecting: error)])
            return
        }
        for task in tasks {
            guard let handler = handlers[task.kind] else { continue }
            send(task, handler)
        }
    }

    private func send(_ task: LedgerStore.OutboxTask, _ handler: Handler) {
        let (status, failure, retrySeconds, body) = Self.decide(task, attempt: {
            handler.send(task)
        }, nowMilliseconds: Self.milliseconds(clock.date))
        handler.count(.attempted(status))
        do {
            try ledger.recordOutboxAttempt(task.kind, key: task.key, status: status, body: body, error: failure,
                                           retryInSeconds: retrySeconds, now: clock.date)
        } catch {
            logger.warning("an outbox attempt could not be recorded",
                           ["outbox.kind": task.kind.rawValue, "flow_no": task.flowNo, "error": String(reflecting: error)])
        }
        logger.info("outbox call", ["outbox.kind": task.kind.rawValue, "flow_no": task.flowNo, "outcome": status.rawValue])
    }

    static func milliseconds(_ date: Date) -> Int64 {
        Int64((date.timeIntervalSince1970 * 1000).rounded(.down))
    }

    /// What to record for a row: `sent`, `pending` again after the returned
    /// seconds, or `failed`; the store is not asked once the window is over.
    package static func decide(_ task: LedgerStore.OutboxTask, attempt: () -> Attempt,
                       nowMilliseconds: Int64) -> (status: OutboxStatus, failure: String?, retrySeconds: Int, body: String?) {
        guard nowMilliseconds < task.windowEndsAtMilliseconds else {
            return (.failed, "the store's window had passed before it could be sent", 0, nil)
        }
        switch attempt() {
        case .sent(let body):
            return (.sent, nil, 0, body)
        case .refused(let failure, let body):
            return (.failed, failure, 0, body)
        case .retry(let failure, let body):
            let retry = min(firstRetrySeconds << min(task.attempts, 20), retrySecondsMax)
            if nowMilliseconds + Int64(retry) * 1000 >= task.windowEndsAtMilliseconds {
                return (.failed, failure + "; the store's window ends before another attempt", 0, body)
            }
            return (.pending, failure, retry, body)
        }
    }
}

extension OutboxSender.Handler {
    /// Apple's consumption answers: the body computed from the credit and
    /// balance as they are now, sent with Send Consumption Information.
    package static func appStoreConsumption(client: ServerAPIClient, preference: ConsumptionAnswer.Preference,
                                    metrics: Metrics) -> Self {
        Self(kind: .appStoreConsumption, timeoutSeconds: client.configuration.timeoutSeconds, send: { task in
            let answer = ConsumptionAnswer(creditStatus: task.creditStatus, creditedAmount: task.creditedAmount,
                                           balance: task.balance, preference: preference)
            let body = answer.json
            do throws(ServerAPIClient.APIError) {
                try client.sendConsumption(task.flowNo, environment: Environment(rawValue: task.environment.rawValue),
                                           body: Data(body.utf8), deadline: client.deadline())
                return .sent(body: body)
            } catch {
                switch error {
                case .unavailable: return .retry(error.description, body: body)
                case .refused(401, _): return .retry(error.description, body: body)
                case .refused, .notFound, .malformedAnswer: return .refused(error.description, body: body)
                }
            }
        }, count: { metrics.countConsumption($0) })
    }
}

extension OutboxSender.Handler {
    /// Consumes a credited Google Play purchase, so Google does not refund
    /// it three days after the purchase. A purchase Google no longer knows,
    /// or says cannot be consumed (already consumed, say), fails the row;
    /// Google being unreachable, or refusing the service's credentials,
    /// is tried again.
    package static func googlePlayConsume(client: PlayClient, metrics: Metrics) -> Self {
        Self(kind: .googlePlayConsume, timeoutSeconds: client.configuration.timeoutSeconds, send: { task in
            guard let productID = task.googleProductID else {
                return .refused("the credit or its product is gone from the ledger", body: nil)
            }
            do throws(PlayAPIError) {
                try client.consume(productID: productID, token: task.key, deadline: client.deadline())
                return .sent(body: nil)
            } catch {
                switch error {
                case .unavailable, .refused(401, _), .refused(403, _): return .retry(error.description, body: nil)
                case .notFound, .refused, .malformedAnswer: return .refused(error.description, body: nil)
                }
            }
        }, count: { metrics.countGoogleConsume($0) })
    }
}
