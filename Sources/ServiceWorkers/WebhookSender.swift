import Crypto
import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import JSON
package import Locking
package import Logging
package import ServiceSupport
import StoreHTTP
import WalletCore
package import WalletStore

/// Delivers events to the webhook endpoints, off every request path and on
/// connections of its own: one thread gives the endpoints their deliveries
/// and leases what is due (each player's first pending delivery per
/// endpoint, so a player's events arrive in order), and `threads` threads
/// POST them, each attempt recorded. A slow or dead endpoint holds only
/// these threads, for at most the timeout each.
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
    /// Events given to an endpoint in one dispatch.
    static let dispatchEventsMax = 2_000
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
    /// Deliveries handed to the senders and not yet recorded.
    private let inFlight = Monitor(0)
    private let state = Monitor(RunState())

    package init(ledger: Ledger, settings: Settings, readiness: Readiness, metrics: Metrics, clock: any WorkClock,
                 logger: Logger) {
        self.ledger = ledger
        self.settings = settings
        self.readiness = readiness
        self.metrics = metrics
        self.clock = clock
        self.logger = logger
        senders = BlockingWork(threads: settings.threads, queueDepthMax: settings.threads, name: "wallet-webhooks")
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
                if leaseAndSend() == 0 { state.pause(seconds: Self.pollSeconds, on: clock) }
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

    /// Dispatches new events, leases as many due deliveries as there are
    /// idle senders, and hands them over; returns how many.
    private func leaseAndSend() -> Int {
        let idle = settings.threads - inFlight.withLock { $0 }
        guard idle > 0 else { return 0 }
        let deliveries: [WebhookDelivery]
        do {
            _ = try ledger.dispatchWebhookEvents(eventsMax: Self.dispatchEventsMax)
            // The lease outlasts the attempt: no other sender takes the row
            // while this one may still be sending it.
            deliveries = try ledger.claimWebhookDeliveries(now: clock.date, limit: idle,
                                                           leaseSeconds: settings.timeoutSeconds + Self.leaseMarginSeconds)
        } catch {
            logger.warning("webhook deliveries could not be leased", ["error": String(reflecting: error)])
            return 0
        }
        for delivery in deliveries {
            inFlight.withLock { $0 += 1 }
            let queued = senders.submit { [self] in
                defer { inFlight.withLock { $0 -= 1 } }
                send(delivery)
            }
            if !queued { inFlight.withLock { $0 -= 1 } }
        }
        return deliveries.count
    }

    private func send(_ delivery: WebhookDelivery) {
        let attempt = self.attempt(delivery)
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

    /// One POST of the delivery's event.
    private func attempt(_ delivery: WebhookDelivery) -> WebhookAttempt {
        guard let event = delivery.event else {
            return WebhookAttempt(delivered: false, status: nil,
                                  error: "the event was deleted after the retention period before it was delivered",
                                  giveUp: true)
        }
        guard let url = URL(string: delivery.url), url.scheme == "https" || (settings.allowHTTP && url.scheme == "http")
        else {
            return WebhookAttempt(delivered: false, status: nil,
                                  error: "an http:// endpoint needs WALLET_WEBHOOKS_ALLOW_HTTP=true")
        }
        let body = event.json.serialized()
        var request = URLRequest(url: url)
        request.httpMethod = "POST"
        request.httpBody = Data(body)
        request.setValue("application/json", forHTTPHeaderField: "Content-Type")
        request.setValue(String(event.id), forHTTPHeaderField: "Wallet-Event-Id")
        request.setValue(Self.signature(secret: delivery.secret, body: body, at: clock.date),
                         forHTTPHeaderField: "Wallet-Signature")
        request.setValue(Self.userAgent, forHTTPHeaderField: "User-Agent")
        switch HTTPExchange.send(request, responseBytesMax: Self.answerBytesMax,
                                 deadline: .now + .seconds(settings.timeoutSeconds), truncating: true) {
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
