import AppStore
import Foundation
import Locking
import Logging
import WalletStore

/// The body of Send Consumption Information (version 2) for one purchase,
/// from what the ledger knows of it.
struct ConsumptionAnswer: Equatable {
    var deliveryStatus: String
    /// Milliunits (100000 = all consumed); only with `DELIVERED`.
    var consumptionPercentage: Int?
    var refundPreference: String

    /// `creditStatus` is the credit's status, nil when never credited.
    init(creditStatus: String?, creditedAmount: Int64?, balance: Int64?, preference: Configuration.RefundPreference) {
        if creditStatus == "credited", let amount = creditedAmount, amount > 0 {
            deliveryStatus = "DELIVERED"
            let left = min(max(balance ?? 0, 0), amount)
            // At most 10^12 coins × 10^5: well inside Int64.
            consumptionPercentage = Int((amount - left) * 100_000 / amount)
        } else {
            deliveryStatus = "UNDELIVERED_OTHER"
            consumptionPercentage = nil
        }
        switch preference {
        case .decline: refundPreference = "DECLINE"
        case .grantFull: refundPreference = "GRANT_FULL"
        case .grantProrated: refundPreference = "GRANT_PRORATED"
        case .auto:
            switch consumptionPercentage {
            case nil, 0: refundPreference = "GRANT_FULL"
            case 100_000: refundPreference = "DECLINE"
            default: refundPreference = "GRANT_PRORATED"
            }
        }
    }

    /// The JSON body, keys in a fixed order.
    var json: String {
        var fields = ["\"customerConsented\":true"]
        if let consumptionPercentage { fields.append("\"consumptionPercentage\":\(consumptionPercentage)") }
        fields.append("\"deliveryStatus\":\"\(deliveryStatus)\"")
        fields.append("\"refundPreference\":\"\(refundPreference)\"")
        fields.append("\"sampleContentProvided\":false")
        return "{" + fields.joined(separator: ",") + "}"
    }
}

/// Sends queued consumption answers from the outbox, off every request
/// path, on one thread: each due row is leased, its body computed from the
/// ledger as it is now, and sent. A failure Apple may get over (no answer,
/// 429, 5xx, 401) is retried with a doubling pause, within Apple's 12-hour
/// window; a refusal, or the end of the window, fails the row for good.
final class ConsumptionSender: Sendable {
    static let pollSeconds = 2.0
    static let batchMax = 20
    static let windowSeconds: Int64 = 12 * 3600
    static let firstRetrySeconds = 5
    static let retrySecondsMax = 1_800

    private let ledger: Ledger
    private let client: ServerAPIClient
    private let preference: Configuration.RefundPreference
    private let readiness: Readiness
    private let metrics: Metrics
    private let logger: Logger
    private let state = Monitor(RunState())

    init(ledger: Ledger, client: ServerAPIClient, preference: Configuration.RefundPreference, readiness: Readiness,
         metrics: Metrics, logger: Logger) {
        self.ledger = ledger
        self.client = client
        self.preference = preference
        self.readiness = readiness
        self.metrics = metrics
        self.logger = logger
    }

    func start() {
        state.startThread(name: "wallet-consumption") { [self] stopping in
            while !stopping() {
                if readiness.isSchemaReady { sendDue() }
                state.pause(seconds: Self.pollSeconds)
            }
        }
    }

    func stop() {
        state.stopThread()
    }

    private func sendDue() {
        let tasks: [LedgerStore.ConsumptionTask]
        do {
            // Sent one after another: the lease outlasts every call of the
            // batch, so no other instance takes a row this one still holds.
            tasks = try ledger.claimConsumption(
                limit: Self.batchMax, leaseSeconds: Int(client.configuration.timeoutSeconds.rounded(.up)) * Self.batchMax + 60)
        } catch {
            logger.warning("consumption answers could not be read", ["error": String(reflecting: error)])
            return
        }
        for task in tasks { send(task) }
    }

    private func send(_ task: LedgerStore.ConsumptionTask) {
        let answer = ConsumptionAnswer(creditStatus: task.creditStatus, creditedAmount: task.creditedAmount,
                                       balance: task.balance, preference: preference)
        let body = answer.json
        let attempt = self.attempt(task, body: body)
        metrics.countConsumption(attempt.status == "sent" ? .sent : attempt.status == "pending" ? .retried : .failed)
        do {
            try ledger.recordConsumptionAttempt(task.notificationUUID, status: attempt.status, body: body,
                                                error: attempt.failure, retryInSeconds: attempt.retrySeconds)
        } catch {
            logger.warning("a consumption answer's attempt could not be recorded",
                           ["appstore.notification_uuid": task.notificationUUID, "error": String(reflecting: error)])
        }
        logger.info("consumption answer", ["appstore.notification_uuid": task.notificationUUID, "outcome": attempt.status,
                                           "appstore.delivery_status": answer.deliveryStatus])
    }

    /// Sends one answer: `sent`, `pending` again after `retrySeconds`, or `failed`.
    private func attempt(_ task: LedgerStore.ConsumptionTask,
                         body: String) -> (status: String, failure: String?, retrySeconds: Int) {
        // Seconds since Apple asked: a request found by reconciliation may be old already.
        let age = (Int64(Date().timeIntervalSince1970 * 1000) - task.requestedAtMilliseconds) / 1000
        guard age < Self.windowSeconds else {
            return ("failed", "Apple's 12-hour window had passed before it could be sent", 0)
        }
        do {
            try client.sendConsumption(task.flowNo, environment: Environment(rawValue: task.environment),
                                       body: Data(body.utf8), deadline: client.deadline())
            return ("sent", nil, 0)
        } catch {
            let retryable: Bool
            switch error {
            case .unavailable: retryable = true
            case .refused(let code, _): retryable = code == 401
            case .notFound, .malformedAnswer: retryable = false
            }
            let retry = min(Self.firstRetrySeconds << min(task.attempts, 20), Self.retrySecondsMax)
            if !retryable { return ("failed", error.description, 0) }
            if age + Int64(retry) >= Self.windowSeconds {
                return ("failed", error.description + "; Apple's 12-hour window ends before another attempt", 0)
            }
            return ("pending", error.description, retry)
        }
    }
}
