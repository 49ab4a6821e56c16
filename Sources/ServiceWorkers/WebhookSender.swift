import Crypto
import Foundation
import JSON
package import Locking
package import Logging
package import ServiceSupport
import StoreHTTP
import WalletCore
package import WalletStore

/// Delivers events to the webhook endpoints, off every request path and on
/// connections of its own. One thread leases an endpoint's next batch of
/// events, read straight from the event log, and `threads` threads POST
/// them, each player's in order, stopping at a player's first failure;
/// the batch then leaves a row only for an event that failed and for what
/// waits behind it. The same thread then leases the rows that are due (each
/// player's first, per endpoint) and tries them again. A slow or dead
/// endpoint holds only these threads, for at most the timeout each.
///
/// Each delivery is one event as JSON (the feed's shape), with
/// `Wallet-Event-Id`, `Wallet-Signature: t=<unix seconds>,v1=<hex
/// HMAC-SHA256(secret, "<t>." + body)>` and a `User-Agent` naming the
/// service. A 2xx answer delivers it; answers are read up to 64 KiB and
/// redirects are not followed. When an attempt is made is the service's
/// clock.
package final class WebhookSender: Sendable {
    package struct Settings: Sendable {
        package var threads: Int
        package var timeoutSeconds: Int
        package var retry: WebhookRetry
        /// Send to `http://` endpoints too (development, loopback).
        package var allowHTTP: Bool

        package init(threads: Int, timeoutSeconds: Int, retry: WebhookRetry, allowHTTP: Bool) {
            self.threads = threads
            self.timeoutSeconds = timeoutSeconds
            self.retry = retry
            self.allowHTTP = allowHTTP
        }
    }

    package static let pollSeconds = 0.25
    package static let answerBytesMax = 64 * 1024
    package static let userAgent = "wallet-webhooks/1"
    /// Events in one batch.
    static let batchMax = 100
    /// How long a lease outlasts the attempt's time limit: time to record
    /// the answer. A sender that dies leaves its delivery for this long.
    static let leaseMarginSeconds = 10
    /// How often the endpoints' backlog is read for /metrics.
    static let backlogSeconds = 5.0

    private let ledger: Ledger
    private let settings: Settings
    private let readiness: Readiness
    private let metrics: Metrics
    private let clock: any WorkClock
    private let logger: Logger
    private let senders: BlockingWork
    /// One kept connection per sender thread, taken for a request and given
    /// back: connections to an endpoint stay open between deliveries.
    private let clients: Locked<[KeptHTTPClient]>
    private let connector = WebhookConnector()
    private let state = Monitor(RunState())

    package init(ledger: Ledger, settings: Settings, readiness: Readiness, metrics: Metrics, clock: any WorkClock,
                 logger: Logger) {
        self.ledger = ledger
        self.settings = settings
        self.readiness = readiness
        self.metrics = metrics
        self.clock = clock
        self.logger = logger
        senders = BlockingWork(threads: settings.threads, queueDepthMax: Self.batchMax, name: "wallet-webhooks")
        clients = Locked([])
    }

    package func start() {
        state.startThread(name: "wallet-webhook-leases") { [self] stopping in
            var backlogReadAt = clock.now - .seconds(Self.backlogSeconds)
            while !stopping() {
                guard readiness.isSchemaReady else {
                    state.pause(seconds: Self.pollSeconds, on: clock)
                    continue
                }
                if clock.now >= backlogReadAt + .seconds(Self.backlogSeconds) {
                    backlogReadAt = clock.now
                    if let endpoints = try? ledger.webhookEndpoints(now: clock.date) { metrics.setWebhookBacklog(endpoints) }
                }
                let sent = sendBatch() + sendRetries()
                if sent == 0 { state.pause(seconds: Self.pollSeconds, on: clock) }
            }
        }
    }

    /// Stops leasing, then lets the attempts under way end (each within the
    /// timeout); a delivery left unrecorded is leased again once its lease
    /// ends.
    package func stop() {
        state.stopThread()
        senders.stop(timeoutSeconds: Double(settings.timeoutSeconds) + 1)
    }

    /// A batch's lease outlasts its longest run: each sender thread trying
    /// its share of the batch's players, one time-out each, then recording.
    private var batchLeaseSeconds: Int {
        settings.timeoutSeconds * (Self.batchMax / settings.threads + 1) + Self.leaseMarginSeconds
    }

    /// Leases an endpoint's next batch and sends it: each player's events
    /// in order on one sender thread, a player's first failure ending its
    /// run (the rest queued behind it), a player already waiting queued
    /// whole. Returns how many events the batch held.
    private func sendBatch() -> Int {
        let batch: WebhookBatch
        do {
            guard let leased = try ledger.leaseWebhookBatch(now: clock.date, leaseSeconds: batchLeaseSeconds,
                                                            limit: Self.batchMax) else { return 0 }
            batch = leased
        } catch {
            logger.warning("a webhook batch could not be leased", ["error": String(reflecting: error)])
            return 0
        }
        let outcome = Locked(WebhookBatchOutcome())
        var players: [String] = []
        var byPlayer: [String: [WalletEvent]] = [:]
        for (event, blocked) in batch.events {
            if blocked {
                outcome.withLock { $0.queued.append(event.id) }
            } else {
                if byPlayer[event.userID] == nil { players.append(event.userID) }
                byPlayer[event.userID, default: []].append(event)
            }
        }
        // As many tasks as sender threads, each taking the next player in
        // line until none is left: a slow player holds one thread only.
        let destination = destination(batch.url)
        let taken = Locked(0)
        let workers = min(settings.threads, players.count)
        let running = Monitor(workers)
        for _ in 0..<workers {
            let queued = senders.submit { [self, players, byPlayer] in
                defer { running.withLock { $0 -= 1 }; running.broadcast() }
                // Ends when every player was taken.
                while let player = taken.withLock({ next -> String? in
                    guard next < players.count else { return nil }
                    next += 1
                    return players[next - 1]
                }) {
                    sendInOrder(byPlayer[player] ?? [], to: destination, secret: batch.secret, into: outcome)
                }
            }
            if !queued { running.withLock { $0 -= 1 } }
        }
        // Bounded by the lease: past it another instance may send the batch again.
        let finished = running.wait(until: .now + .seconds(batchLeaseSeconds - Self.leaseMarginSeconds)) { $0 == 0 }
        guard finished else {
            logger.warning("a webhook batch outlasted its lease", ["webhook.endpoint": String(batch.endpointID)])
            return batch.events.count
        }
        // Players no task took (the sender threads' queue was full) wait.
        for player in players[taken.withLock({ $0 })...] {
            outcome.withLock { $0.queued += (byPlayer[player] ?? []).map(\.id) }
        }
        let result = outcome.withLock { $0 }
        do {
            try ledger.finishWebhookBatch(batch, result, now: clock.date, retry: settings.retry)
            for _ in 0..<result.delivered { metrics.countWebhookAttempt(.delivered) }
            for _ in result.failed { metrics.countWebhookAttempt(.pending) }
        } catch {
            logger.warning("a webhook batch could not be recorded; it is sent again once its lease ends",
                           ["webhook.endpoint": String(batch.endpointID), "error": String(reflecting: error)])
        }
        return batch.events.count
    }

    /// One player's events of a batch, in order, until one fails.
    private func sendInOrder(_ events: [WalletEvent], to destination: Destination, secret: [UInt8],
                             into outcome: Locked<WebhookBatchOutcome>) {
        for (index, event) in events.enumerated() {
            let attempt = self.attempt(event, to: destination, secret: secret)
            if attempt.delivered {
                outcome.withLock { $0.delivered += 1 }
                continue
            }
            outcome.withLock {
                $0.failed.append((event.id, attempt.status, attempt.error ?? "not delivered"))
                $0.queued += events[(index + 1)...].map(\.id)
            }
            return
        }
    }

    /// Leases as many due retries as there are sender threads, tries them
    /// and records each; returns how many.
    private func sendRetries() -> Int {
        let deliveries: [WebhookDelivery]
        do {
            deliveries = try ledger.claimWebhookDeliveries(now: clock.date, limit: settings.threads,
                                                           leaseSeconds: settings.timeoutSeconds + Self.leaseMarginSeconds)
        } catch {
            logger.warning("webhook retries could not be leased", ["error": String(reflecting: error)])
            return 0
        }
        let running = Monitor(deliveries.count)
        for delivery in deliveries {
            let queued = senders.submit { [self] in
                defer { running.withLock { $0 -= 1 }; running.broadcast() }
                send(delivery)
            }
            if !queued { running.withLock { $0 -= 1 } }
        }
        _ = running.wait(until: .now + .seconds(settings.timeoutSeconds + Self.leaseMarginSeconds)) { $0 == 0 }
        return deliveries.count
    }

    private func send(_ delivery: WebhookDelivery) {
        let attempt: WebhookAttempt
        if let event = delivery.event {
            attempt = self.attempt(event, to: destination(delivery.url), secret: delivery.secret)
        } else {
            attempt = WebhookAttempt(delivered: false, status: nil,
                                     error: "the event was deleted after the retention period before it was delivered",
                                     giveUp: true)
        }
        do {
            let status = try ledger.recordWebhookAttempt(delivery, attempt, now: clock.date, retry: settings.retry)
            if let status { metrics.countWebhookAttempt(status) }
            if status == .failed {
                logger.warning("webhook delivery failed for good", [
                    "webhook.endpoint": String(delivery.endpointID), "event.id": String(delivery.eventID),
                    "error": attempt.error ?? "-"])
            }
        } catch {
            logger.warning("a webhook attempt could not be recorded", [
                "webhook.endpoint": String(delivery.endpointID), "event.id": String(delivery.eventID),
                "error": String(reflecting: error)])
        }
    }

    /// An endpoint's URL as a request target, or why it is not sent to.
    private enum Destination {
        case target(KeptHTTPClient.Target)
        case refused(String)
    }

    private func destination(_ text: String) -> Destination {
        guard let url = URL(string: text), let target = KeptHTTPClient.Target(url),
              target.origin.secure || settings.allowHTTP else {
            return .refused("an http:// endpoint needs WALLET_WEBHOOKS_ALLOW_HTTP=true")
        }
        return .target(target)
    }

    /// One POST of an event.
    private func attempt(_ event: WalletEvent, to destination: Destination, secret: [UInt8]) -> WebhookAttempt {
        let target: KeptHTTPClient.Target
        switch destination {
        case .target(let found): target = found
        case .refused(let reason): return WebhookAttempt(delivered: false, status: nil, error: reason)
        }
        let body = event.json.serialized()
        let headers = [
            ("Content-Type", "application/json"),
            ("Wallet-Event-Id", String(event.id)),
            ("Wallet-Signature", Self.signature(secret: secret, body: body, at: clock.date)),
            ("User-Agent", Self.userAgent),
        ]
        // As many clients as sender threads, each thread holding one at most.
        let client = clients.withLock { $0.popLast() }
            ?? KeptHTTPClient(answerBytesMax: Self.answerBytesMax, connect: connector.connect)
        defer { clients.withLock { $0.append(client) } }
        switch client.post(target, headers: headers, body: body, deadline: .now + .seconds(settings.timeoutSeconds)) {
        case .response(let status, _, _):
            let delivered = (200..<300).contains(status)
            return WebhookAttempt(delivered: delivered, status: status, error: delivered ? nil : "answered \(status)")
        case .failure(let reason):
            return WebhookAttempt(delivered: false, status: nil, error: reason)
        }
    }

    /// `t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>." + body)>`.
    static func signature(secret: [UInt8], body: [UInt8], at date: Date) -> String {
        let timestamp = String(Int64(date.timeIntervalSince1970.rounded(.down)))
        let code = HMACSHA256.authenticationCode(key: secret, message: Array(timestamp.utf8) + [UInt8(ascii: ".")] + body)
        return "t=\(timestamp),v1=\(hexString(code))"
    }
}
