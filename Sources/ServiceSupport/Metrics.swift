package import AppStore
import Foundation
package import GooglePlay
package import HTTPServer
import Locking
import StoreHTTP
package import WalletCore
package import WalletStore

/// Prometheus metrics, all prefixed `wallet_`: per-route request counts and
/// latency histograms by status class, the database pool, database errors,
/// group-commit batches and App Store notifications.
///
/// Every label value comes from a fixed set, never from the client: a method
/// outside the standard ones counts as `other`, a path no route matches as
/// `unmatched`. So the exposition stays the same size whatever clients send.
/// An outcome's label set is its enum's cases (`MetricLabels`), the enum the
/// ledger's answers are decoded into: a new case is a new series, with no
/// list here to keep in step.
package final class Metrics: Sendable, StoreMetrics {
    package static let latencyBucketsSeconds: [Double] = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10]
    package static let batchSizeBuckets: [Double] = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024]

    /// The methods counted by name; any other is `other`.
    package static let methods: Set<String> = ["GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "TRACE", "CONNECT"]

    /// How an App Store notification ended, for
    /// `wallet_appstore_notifications_total`: applied, with what
    /// `wallet.apply_appstore_notification` answered; refused by
    /// verification, with its reason; or not applied.
    package enum NotificationOutcome: MetricLabels {
        case applied(AppStoreNotificationOutcome)
        case refused(VerificationFailure)
        case failed(NotificationFailure)

        package static var allCases: [Self] {
            AppStoreNotificationOutcome.allCases.map(Self.applied) + VerificationFailure.allCases.map(Self.refused)
                + NotificationFailure.allCases.map(Self.failed)
        }

        package var labels: String {
            switch self {
            case .applied(let outcome): "outcome=\"\(outcome.rawValue)\""
            case .refused(let reason): "outcome=\"refused\",reason=\"\(reason.rawValue)\""
            case .failed(let failure): "outcome=\"\(failure.rawValue)\""
            }
        }
    }

    /// Why a notification was not applied, when it was not refused.
    package enum NotificationFailure: String, CaseIterable {
        /// The pool for notification work was full; answered 503.
        case overloaded
        /// The database failed or could not be reached.
        case error
    }

    private struct RouteKey: Hashable {
        var method: String
        var route: String
        var statusClass: String
    }

    private struct Histogram {
        var buckets: [UInt64]
        var count: UInt64 = 0
        var sum: Double = 0

        init(bucketCount: Int) {
            buckets = Array(repeating: 0, count: bucketCount)
        }

        mutating func observe(_ value: Double, bounds: [Double]) {
            for (index, bound) in bounds.enumerated() where value <= bound {
                buckets[index] += 1
            }
            count += 1
            sum += value
        }
    }

    /// Coins moved by the service (counted after COMMIT), for
    /// `wallet_coins_total`. The operator's psql scripts move coins too; only
    /// the ledger sees those.
    package enum CoinMovement: String, CaseIterable {
        /// Credits of purchases (not replays).
        case credited
        /// Debits and captured holds (not replays).
        case debited
        /// Refunds applied from App Store notifications.
        case refunded
        /// The game server's grants (POST /v1/grants; not replays).
        case granted
    }

    /// `wallet_db_errors_total` kinds exported from start-up at zero; the
    /// `sqlstate_XXXXX` and `other` kinds appear when they happen.
    package static let databaseErrorKinds = ["unavailable", "pool_timeout", "deadline", "unconfirmed_commit", "fast_fail"]
    /// The status classes every route's request series start with: the
    /// ones the dashboard's rates and the 5xx alert divide.
    package static let statusClasses = ["2xx", "5xx"]

    private struct State: Sendable {
        var requests: [RouteKey: Histogram] = [:]
        var coins: [String: UInt64] = [:]
        var databaseErrors: [String: UInt64] = [:]
        var batches: [BatchOperation: Histogram] = [:]
        var notifications: [NotificationOutcome: UInt64] = [:]
        var storeRequests: [StoreRequestKey: Histogram] = [:]
        var consumption: [ConsumptionOutcome: UInt64] = [:]
        var googleConsumes: [ConsumptionOutcome: UInt64] = [:]
        var googleNotifications: [GoogleNotificationOutcome: UInt64] = [:]
        var googleVoids: [GoogleVoidOutcome: UInt64] = [:]
        var webhookAttempts: [WebhookDeliveryStatus: UInt64] = [:]
        /// The endpoints' backlog as the webhook sender last read it.
        var webhookEndpoints: [WebhookEndpoint] = []
        var credits: [CreditPath: UInt64] = [:]
        /// Unclaimed purchases, and the oldest one's age, as upkeep last read them.
        var unclaimed = UnclaimedPurchases(count: 0, oldestSeconds: 0)
        /// The database's WAL archiving, as upkeep last read it; nil until then.
        var walArchive: WALArchiveStatus?
        /// Violations the ledger verifier found, summed over its rounds.
        var invariantViolations: UInt64 = 0
        /// The last entry the verifier's checkpoint reached; 0 until one has.
        var verifiedEntryID: Int64 = 0
    }

    /// How applying one Google Play void ended, for
    /// `wallet_googleplay_voids_total`: each void the sweep reads, and each
    /// push Google confirmed.
    package enum GoogleVoidOutcome: MetricLabels {
        /// What `wallet.apply_googleplay_voids` answered.
        case applied(GooglePlayVoidOutcome)
        /// An entry of Google's list the service does not take (a token too
        /// long, a quantity below 1): logged, not applied.
        case refused
        /// The database did not apply it (a check, a lock, a timeout):
        /// logged, and tried again by the next sweep.
        case failed

        package static var allCases: [Self] { GooglePlayVoidOutcome.allCases.map(Self.applied) + [.refused, .failed] }

        package var labels: String {
            switch self {
            case .applied(let outcome): "outcome=\"\(outcome.rawValue)\""
            case .refused: "outcome=\"refused\""
            case .failed: "outcome=\"failed\""
            }
        }
    }

    /// How a Google Play notification ended, for
    /// `wallet_googleplay_notifications_total`: what applying it did, or why
    /// it was not applied.
    package enum GoogleNotificationOutcome: MetricLabels {
        case applied(GooglePlayNotificationOutcome)
        case notApplied(GoogleNotificationFailure)

        package static var allCases: [Self] {
            GooglePlayNotificationOutcome.allCases.map(Self.applied) + GoogleNotificationFailure.allCases.map(Self.notApplied)
        }

        package var labels: String {
            switch self {
            case .applied(let outcome): "outcome=\"\(outcome.rawValue)\""
            case .notApplied(let failure): "outcome=\"\(failure.rawValue)\""
            }
        }
    }

    /// Why a Google Play push was not applied.
    package enum GoogleNotificationFailure: String, CaseIterable {
        /// For another app's package: answered 204, not recorded.
        case ignored
        /// Its OIDC token was refused.
        case unauthorized
        /// Not a Pub/Sub push of a developer notification.
        case malformed
        /// A void Google does not show (yet).
        case unconfirmed
        /// The queue for Google Play work was full.
        case overloaded
        /// Google's keys or API, or the database, could not be reached.
        case error
    }

    /// The stores whose server APIs the service calls; each has its own
    /// metric families, `wallet_<store>_api_requests_total` and
    /// `wallet_<store>_api_request_duration_seconds`.
    package enum Store: String, CaseIterable {
        case appStore = "appstore"
        case googlePlay = "googleplay"

        package var displayName: String { self == .appStore ? "App Store Server API" : "Google Play Developer API" }
    }

    /// One exchange's labels, each from its client's fixed set.
    private struct StoreRequestKey: Hashable {
        var store: Store
        var endpoint: String
        var status: String
    }

    /// How a call the outbox owes a store ended, for
    /// `wallet_appstore_consumption_total` and `wallet_googleplay_consume_total`:
    /// queued, or an attempt that left its row in an outbox status.
    package enum ConsumptionOutcome: MetricLabels {
        /// Queued for sending.
        case queued
        /// Sent (`sent`), to be tried again (`pending`: labelled `retried`),
        /// or refused by the store or out of time (`failed`).
        case attempted(OutboxStatus)

        package static var allCases: [Self] { [.queued] + OutboxStatus.allCases.map(Self.attempted) }

        package var labels: String {
            switch self {
            case .queued: "outcome=\"queued\""
            case .attempted(.pending): "outcome=\"retried\""
            case .attempted(let status): "outcome=\"\(status.rawValue)\""
            }
        }
    }

    /// Which path credited a purchase, for `wallet_credits_total`.
    package enum CreditPath: String, MetricLabels {
        /// The app backend's call (`POST /v1/credits`).
        case client
        /// The store's own notification, as it was pushed.
        case notification
        /// The store's notification, found by the reconcile sweep.
        case sweep
        /// An unclaimed purchase, once its player was issued its token.
        case claim

        package var labels: String { "path=\"\(rawValue)\"" }
    }

    private let state = Locked(State())
    private let started = Date()

    /// Every series a dashboard or an alert queries exists from start-up,
    /// at zero, so that no rule waits for a series to appear: each route
    /// with each status class, the coin kinds, the fixed database error
    /// kinds, the batch operations, the notification outcomes (refusals by
    /// each reason) and the consumption outcomes.
    package init() {
        state.withLock { state in
            for kind in CoinMovement.allCases { state.coins[kind.rawValue] = 0 }
            for kind in Self.databaseErrorKinds { state.databaseErrors[kind] = 0 }
            for operation in BatchOperation.allCases {
                state.batches[operation] = Histogram(bucketCount: Self.batchSizeBuckets.count)
            }
            state.notifications = NotificationOutcome.zeros
            state.consumption = ConsumptionOutcome.zeros
            state.googleConsumes = ConsumptionOutcome.zeros
            state.googleNotifications = GoogleNotificationOutcome.zeros
            state.googleVoids = GoogleVoidOutcome.zeros
            state.webhookAttempts = WebhookDeliveryStatus.zeros
            state.credits = CreditPath.zeros
        }
    }

    /// Counts a purchase credited (not a replay) by the path that credited it.
    package func countCredit(_ path: CreditPath) {
        state.withLock { $0.credits[path, default: 0] += 1 }
    }

    /// Keeps the unclaimed purchases' count and oldest age for the next scrape.
    package func setUnclaimed(_ unclaimed: UnclaimedPurchases) {
        state.withLock { $0.unclaimed = unclaimed }
    }

    /// Counts what one round of the ledger verifier found, and keeps the
    /// last entry its checkpoint reached (nil: none yet).
    package func recordLedgerCheck(violations: Int, verifiedEntryID: Int64?) {
        state.withLock { state in
            state.invariantViolations += UInt64(violations)
            if let verifiedEntryID { state.verifiedEntryID = max(state.verifiedEntryID, verifiedEntryID) }
        }
    }

    /// Keeps the WAL archiver's state for the next scrape.
    package func setWALArchive(_ status: WALArchiveStatus) {
        state.withLock { $0.walArchive = status }
    }

    /// Counts a webhook attempt by what it left its delivery: delivered,
    /// pending again (`retried`) or failed.
    package func countWebhookAttempt(_ status: WebhookDeliveryStatus) {
        state.withLock { $0.webhookAttempts[status, default: 0] += 1 }
    }

    /// Keeps the endpoints' backlog for the next scrape.
    package func setWebhookBacklog(_ endpoints: [WebhookEndpoint]) {
        state.withLock { $0.webhookEndpoints = endpoints }
    }

    /// Starts each route's request series at zero in every status class.
    package func seed(routes: [(method: String, pattern: String)]) {
        state.withLock { state in
            for route in routes {
                for statusClass in Self.statusClasses {
                    let method = Self.methods.contains(route.method) ? route.method : "other"
                    let key = RouteKey(method: method, route: route.pattern, statusClass: statusClass)
                    if state.requests[key] == nil {
                        state.requests[key] = Histogram(bucketCount: Self.latencyBucketsSeconds.count)
                    }
                }
            }
        }
    }

    /// Counts coins the service moved, once its transaction committed.
    package func countCoins(_ kind: CoinMovement, _ amount: Int64) {
        guard amount > 0 else { return }
        state.withLock { $0.coins[kind.rawValue, default: 0] += UInt64(amount) }
    }

    package func observeRequest(method: String, route: String?, status: Int, durationSeconds: Double) {
        let key = RouteKey(method: Self.methods.contains(method) ? method : "other", route: route ?? "unmatched",
                           statusClass: "\(status / 100)xx")
        state.withLock { state in
            state.requests[key, default: Histogram(bucketCount: Self.latencyBucketsSeconds.count)]
                .observe(durationSeconds, bounds: Self.latencyBucketsSeconds)
        }
    }

    /// One answered request, as the HTTP server reports it.
    package func observe(_ completed: CompletedRequest) {
        observeRequest(method: completed.method, route: completed.routePattern, status: completed.status,
                       durationSeconds: completed.durationSeconds)
    }

    /// Counts a database failure by kind: `unavailable`, `timeout`, `sqlstate_XXXXX`.
    package func countDatabaseError(kind: String) {
        state.withLock { $0.databaseErrors[kind, default: 0] += 1 }
    }

    /// Counts a server-thread read answered 503 at once, without asking the
    /// database, because one just found it unavailable.
    package func countDatabaseUnavailableFastFail() {
        state.withLock { $0.databaseErrors["fast_fail", default: 0] += 1 }
    }

    /// Counts an App Store notification by how it ended.
    package func countNotification(_ outcome: NotificationOutcome) {
        state.withLock { $0.notifications[outcome, default: 0] += 1 }
    }

    /// One exchange with the App Store Server API; both labels are fixed sets.
    package func observeAppleRequest(endpoint: ServerAPIClient.Endpoint, status: ServerAPIClient.StatusClass, seconds: Double) {
        observeStoreRequest(StoreRequestKey(store: .appStore, endpoint: endpoint.rawValue, status: status.rawValue), seconds)
    }

    /// One exchange with the Google Play Developer API (its token endpoint
    /// included); both labels are fixed sets.
    package func observeGoogleRequest(endpoint: PlayClient.Endpoint, status: PlayClient.StatusClass, seconds: Double) {
        observeStoreRequest(StoreRequestKey(store: .googlePlay, endpoint: endpoint.rawValue, status: status.rawValue), seconds)
    }

    /// One fetch of Google's push-token keys, as endpoint `push_keys`.
    package func observeGoogleKeysFetch(status: String, seconds: Double) {
        observeStoreRequest(StoreRequestKey(store: .googlePlay, endpoint: "push_keys", status: status), seconds)
    }

    private func observeStoreRequest(_ key: StoreRequestKey, _ seconds: Double) {
        state.withLock { state in
            state.storeRequests[key, default: Histogram(bucketCount: Self.latencyBucketsSeconds.count)]
                .observe(seconds, bounds: Self.latencyBucketsSeconds)
        }
    }

    /// Counts a Google Play notification by how it ended.
    package func countGooglePlayNotification(_ outcome: GoogleNotificationOutcome) {
        state.withLock { $0.googleNotifications[outcome, default: 0] += 1 }
    }

    /// Counts Google Play voids by how applying them ended.
    package func countGoogleVoids(_ outcome: GoogleVoidOutcome, by count: Int = 1) {
        guard count > 0 else { return }
        state.withLock { $0.googleVoids[outcome, default: 0] += UInt64(count) }
    }

    /// How a Google Play consume ended (the outcomes of Apple's consumption answers).
    package func countGoogleConsume(_ outcome: ConsumptionOutcome) {
        state.withLock { $0.googleConsumes[outcome, default: 0] += 1 }
    }

    package func countConsumption(_ outcome: ConsumptionOutcome, by count: Int = 1) {
        guard count > 0 else { return }
        state.withLock { $0.consumption[outcome, default: 0] += UInt64(count) }
    }

    package func observeBatch(operation: BatchOperation, size: Int) {
        state.withLock { state in
            state.batches[operation, default: Histogram(bucketCount: Self.batchSizeBuckets.count)]
                .observe(Double(size), bounds: Self.batchSizeBuckets)
        }
    }

    /// The Prometheus text exposition. `ready` is what `/readyz` would
    /// answer now; `writerQueueDepthMax` is the writers' queue bound.
    package func render(pool: Ledger.PoolStatistics?, writerQueueDepth: Int, writerQueueFullest: Int = 0, writerQueueDepthMax: Int = 0,
                readQueueDepth: Int = 0, ready: Bool = false) -> String {
        let snapshot = state.withLock { $0 }
        var out = ""
        out += "# HELP wallet_http_requests_total HTTP requests by route, method and status class.\n"
        out += "# TYPE wallet_http_requests_total counter\n"
        let keys = snapshot.requests.keys.sorted { ($0.route, $0.method, $0.statusClass) < ($1.route, $1.method, $1.statusClass) }
        for key in keys {
            out += "wallet_http_requests_total{\(labels(key))} \(snapshot.requests[key]!.count)\n"
        }
        out += "# HELP wallet_http_request_duration_seconds HTTP request latency by route, method and status class.\n"
        out += "# TYPE wallet_http_request_duration_seconds histogram\n"
        for key in keys {
            histogram(&out, name: "wallet_http_request_duration_seconds", labels: labels(key),
                      histogram: snapshot.requests[key]!, bounds: Self.latencyBucketsSeconds)
        }
        if let pool {
            for (name, type, help, value) in [
                ("wallet_db_pool_connections", "gauge", "Database connections open in the pool.", pool.open),
                ("wallet_db_pool_in_use", "gauge", "Database connections lent out.", pool.inUse),
                ("wallet_db_pool_waiting", "gauge", "Callers waiting for a database connection.", pool.waiting),
                ("wallet_db_pool_size_max", "gauge", "The pool's connection limit.", pool.maximum),
                ("wallet_db_connections_broken_total", "counter", "Connections found broken and replaced.", pool.broken),
            ] {
                out += "# HELP \(name) \(help)\n# TYPE \(name) \(type)\n\(name) \(value)\n"
            }
        }
        counters(&out, name: "wallet_db_errors_total", help: "Database errors by kind.", label: "kind",
                 values: snapshot.databaseErrors)
        out += "# HELP wallet_batch_operations Operations per group-commit batch.\n"
        out += "# TYPE wallet_batch_operations histogram\n"
        for operation in snapshot.batches.keys.sorted(by: { $0.rawValue < $1.rawValue }) {
            histogram(&out, name: "wallet_batch_operations", labels: "operation=\"\(operation.rawValue)\"",
                      histogram: snapshot.batches[operation]!, bounds: Self.batchSizeBuckets)
        }
        counters(&out, name: "wallet_appstore_notifications_total",
                 help: "App Store notifications by outcome, and refusals by reason.", values: snapshot.notifications)
        for store in Store.allCases {
            let keys = snapshot.storeRequests.keys.filter { $0.store == store }.sorted { ($0.endpoint, $0.status) < ($1.endpoint, $1.status) }
            let family = "wallet_\(store.rawValue)_api"
            out += "# HELP \(family)_requests_total \(store.displayName) requests by endpoint and status class.\n"
            out += "# TYPE \(family)_requests_total counter\n"
            for key in keys {
                out += "\(family)_requests_total{endpoint=\"\(key.endpoint)\",status=\"\(key.status)\"} "
                    + "\(snapshot.storeRequests[key]!.count)\n"
            }
            out += "# HELP \(family)_request_duration_seconds \(store.displayName) latency by endpoint and status class.\n"
            out += "# TYPE \(family)_request_duration_seconds histogram\n"
            for key in keys {
                histogram(&out, name: "\(family)_request_duration_seconds",
                          labels: "endpoint=\"\(key.endpoint)\",status=\"\(key.status)\"",
                          histogram: snapshot.storeRequests[key]!, bounds: Self.latencyBucketsSeconds)
            }
        }
        counters(&out, name: "wallet_appstore_consumption_total", help: "Consumption answers to Apple by outcome.",
                 values: snapshot.consumption)
        counters(&out, name: "wallet_googleplay_consume_total", help: "Google Play purchases consumed, by outcome.",
                 values: snapshot.googleConsumes)
        counters(&out, name: "wallet_googleplay_notifications_total",
                 help: "Google Play real-time developer notifications by outcome.", values: snapshot.googleNotifications)
        counters(&out, name: "wallet_googleplay_voids_total",
                 help: "Google Play voids by how applying them ended; failed ones are tried again by the next sweep.",
                 values: snapshot.googleVoids)
        counters(&out, name: "wallet_webhook_deliveries_total",
                 help: "Webhook delivery attempts by what they left the delivery: delivered, retried or failed.",
                 values: snapshot.webhookAttempts)
        for (name, help, value) in [
            ("wallet_webhook_pending", "Deliveries an endpoint is owed.", { (e: WebhookEndpoint) in String(e.pending) }),
            ("wallet_webhook_oldest_undelivered_seconds",
             "Age of the oldest event an endpoint has not received yet; 0 when it is caught up.",
             { (e: WebhookEndpoint) in String(e.oldestUndeliveredSeconds) }),
            ("wallet_webhook_endpoint_enabled", "1 while an endpoint is enabled; 0 once disabled (by an operator, or for failing).",
             { (e: WebhookEndpoint) in e.enabled ? "1" : "0" }),
        ] {
            out += "# HELP \(name) \(help)\n# TYPE \(name) gauge\n"
            for endpoint in snapshot.webhookEndpoints {
                out += "\(name){endpoint=\"\(endpoint.id)\"} \(value(endpoint))\n"
            }
        }
        counters(&out, name: "wallet_credits_total",
                 help: "Purchases credited (not replays) by the path that credited them, counted after COMMIT.",
                 values: snapshot.credits)
        out += "# HELP wallet_unclaimed_purchases Verified purchases that name no player the wallet knows, not yet credited.\n"
        out += "# TYPE wallet_unclaimed_purchases gauge\nwallet_unclaimed_purchases \(snapshot.unclaimed.count)\n"
        out += "# HELP wallet_unclaimed_purchase_oldest_seconds Age of the oldest unclaimed purchase; 0 when there is none.\n"
        out += "# TYPE wallet_unclaimed_purchase_oldest_seconds gauge\n"
        out += "wallet_unclaimed_purchase_oldest_seconds \(snapshot.unclaimed.oldestSeconds)\n"
        walArchive(&out, snapshot.walArchive)
        out += "# HELP wallet_invariant_violations_total Ledger invariant violations the verifier found, counted each round "
            + "that finds them.\n"
        out += "# TYPE wallet_invariant_violations_total counter\n"
        out += "wallet_invariant_violations_total \(snapshot.invariantViolations)\n"
        out += "# HELP wallet_verified_entry_id The last entry id the verifier's clean checks reached; 0 until one has.\n"
        out += "# TYPE wallet_verified_entry_id gauge\nwallet_verified_entry_id \(snapshot.verifiedEntryID)\n"
        counters(&out, name: "wallet_coins_total", help: "Coins moved by the service, by kind, counted after COMMIT.",
                 label: "kind", values: snapshot.coins)
        out += "# HELP wallet_ready 1 when the service is ready (as /readyz answers 200), else 0.\n"
        out += "# TYPE wallet_ready gauge\nwallet_ready \(ready ? 1 : 0)\n"
        out += "# HELP wallet_writer_queue_depth Operations waiting for a database writer.\n"
        out += "# TYPE wallet_writer_queue_depth gauge\nwallet_writer_queue_depth \(writerQueueDepth)\n"
        out += "# HELP wallet_writer_queue_depth_fullest Operations waiting in the fullest writer's queue.\n"
        out += "# TYPE wallet_writer_queue_depth_fullest gauge\nwallet_writer_queue_depth_fullest \(writerQueueFullest)\n"
        out += "# HELP wallet_writer_queue_depth_max The bound of one writer's queue; a write to a full one is refused as overloaded.\n"
        out += "# TYPE wallet_writer_queue_depth_max gauge\nwallet_writer_queue_depth_max \(writerQueueDepthMax)\n"
        out += "# HELP wallet_read_queue_depth Balance reads waiting for the next batched query.\n"
        out += "# TYPE wallet_read_queue_depth gauge\nwallet_read_queue_depth \(readQueueDepth)\n"
        out += "# HELP wallet_uptime_seconds Seconds since the service started.\n"
        out += "# TYPE wallet_uptime_seconds gauge\nwallet_uptime_seconds \(Int(Date().timeIntervalSince(started)))\n"
        return out
    }

    /// The database's WAL archiving (pg_stat_archiver), as upkeep last read
    /// it: every series from start-up, at zero until the first read.
    private func walArchive(_ out: inout String, _ status: WALArchiveStatus?) {
        for (name, type, help, value) in [
            ("wallet_wal_archive_enabled", "gauge",
             "1 when the database archives its WAL (archive_mode on or always), else 0.", status?.enabled == true ? "1" : "0"),
            ("wallet_wal_archived_total", "counter",
             "WAL files the database archived since its statistics were reset.", String(status?.archivedCount ?? 0)),
            ("wallet_wal_archive_failures_total", "counter",
             "Failed attempts to archive a WAL file since the database's statistics were reset.",
             String(status?.failedCount ?? 0)),
            ("wallet_wal_archive_last_success_timestamp_seconds", "gauge",
             "Unix time a WAL file was last archived; 0 for never.", seconds(status?.lastArchivedSeconds)),
            ("wallet_wal_archive_last_failure_timestamp_seconds", "gauge",
             "Unix time archiving a WAL file last failed; 0 for never.", seconds(status?.lastFailedSeconds)),
            ("wallet_wal_archive_pending_bytes", "gauge",
             "WAL written past the end of the last archived segment, the open one included: what losing the "
                + "database's disk would lose; 0 when it cannot be told (archiving off, a standby, nothing archived yet).",
             String(status?.pendingBytes ?? 0)),
        ] {
            out += "# HELP \(name) \(help)\n# TYPE \(name) \(type)\n\(name) \(value)\n"
        }
    }

    private func seconds(_ value: Double?) -> String {
        guard let value else { return "0" }
        return String(format: "%.3f", value)
    }

    private func labels(_ key: RouteKey) -> String {
        "route=\"\(escape(key.route))\",method=\"\(escape(key.method))\",status=\"\(key.statusClass)\""
    }

    /// A counter family with one label, its series in label order.
    private func counters(_ out: inout String, name: String, help: String, label: String, values: [String: UInt64]) {
        out += "# HELP \(name) \(help)\n# TYPE \(name) counter\n"
        for value in values.keys.sorted() {
            out += "\(name){\(label)=\"\(value)\"} \(values[value]!)\n"
        }
    }

    /// A counter family whose series are an enum's cases, in label order.
    private func counters<Outcome: MetricLabels>(_ out: inout String, name: String, help: String,
                                                 values: [Outcome: UInt64]) {
        out += "# HELP \(name) \(help)\n# TYPE \(name) counter\n"
        for (labels, count) in values.map({ ($0.key.labels, $0.value) }).sorted(by: { $0.0 < $1.0 }) {
            out += "\(name){\(labels)} \(count)\n"
        }
    }

    private func histogram(_ out: inout String, name: String, labels: String, histogram: Histogram, bounds: [Double]) {
        for (index, bound) in bounds.enumerated() {
            out += "\(name)_bucket{\(labels),le=\"\(format(bound))\"} \(histogram.buckets[index])\n"
        }
        out += "\(name)_bucket{\(labels),le=\"+Inf\"} \(histogram.count)\n"
        out += "\(name)_sum{\(labels)} \(histogram.sum)\n"
        out += "\(name)_count{\(labels)} \(histogram.count)\n"
    }

    private func format(_ value: Double) -> String {
        value == value.rounded() ? String(Int(value)) : String(value)
    }

    private func escape(_ text: String) -> String {
        text.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "\"", with: "\\\"")
            .replacingOccurrences(of: "\n", with: "\\n")
    }
}

/// A metric's label set that is an enum's cases: `labels` is one series'
/// Prometheus labels (`outcome="refunded"`), and every case's series
/// exists from start-up, at zero.
package protocol MetricLabels: Hashable, Sendable, CaseIterable where AllCases == [Self] {
    var labels: String { get }
}

extension MetricLabels {
    /// Every series at zero.
    package static var zeros: [Self: UInt64] { Dictionary(uniqueKeysWithValues: allCases.map { ($0, 0) }) }
}

extension WebhookDeliveryStatus: MetricLabels {
    package var labels: String {
        switch self {
        case .pending: "outcome=\"retried\""
        case .delivered, .failed: "outcome=\"\(rawValue)\""
        }
    }
}
