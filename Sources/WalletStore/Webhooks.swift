public import Foundation
import Postgres
public import WalletCore

/// A webhook endpoint as `wallet webhooks list` and the console show it,
/// with its backlog.
public struct WebhookEndpoint: Sendable, Equatable {
    public var id: Int64
    public var url: String
    /// The types it receives; nil for all of them (`*`).
    public var eventTypes: [EventType]?
    public var enabled: Bool
    public var disabledReason: String?
    /// Since when every attempt has failed; nil after a success.
    public var failingSince: Date?
    public var pending: Int
    /// The age of the oldest event it has not received yet, 0 when none.
    public var oldestUndeliveredSeconds: Double
}

/// A delivery leased for sending: its endpoint, and its event (nil when
/// retention deleted it before it could be delivered).
public struct WebhookDelivery: Sendable {
    public var endpointID: Int64
    public var url: String
    public var secret: [UInt8]
    /// Attempts made before this one.
    public var attempts: Int
    public var eventID: Int64
    public var event: WalletEvent?
}

/// An endpoint's next events, leased for sending: each with whether its
/// player is waiting on an earlier, failed event (then it is queued, not
/// sent), and the endpoint's mark once the batch is done.
public struct WebhookBatch: Sendable {
    public var endpointID: Int64
    public var url: String
    public var secret: [UInt8]
    public var through: Int64
    public var events: [(event: WalletEvent, blocked: Bool)]
}

/// How a batch went: the events that failed (with the answer's status, if
/// any, and what went wrong), those queued behind a failure or a waiting
/// player, and how many were delivered.
public struct WebhookBatchOutcome: Sendable {
    public var failed: [(eventID: Int64, status: Int?, error: String)] = []
    public var queued: [Int64] = []
    public var delivered = 0

    public init() {}
}

/// What became of one attempt.
public struct WebhookAttempt: Sendable {
    /// A 2xx answer.
    public var delivered: Bool
    /// The answer's status, nil when there was none.
    public var status: Int?
    /// What went wrong, in words; nil when delivered.
    public var error: String?
    /// The event is gone: stop trying.
    public var giveUp: Bool

    public init(delivered: Bool, status: Int?, error: String?, giveUp: Bool = false) {
        self.delivered = delivered
        self.status = status
        self.error = error
        self.giveUp = giveUp
    }
}

/// How deliveries are retried: the retry period since the event, and the
/// first pause (which doubles up to an hour).
public struct WebhookRetry: Sendable {
    public var hours: Int
    public var firstSeconds: Int

    public init(hours: Int, firstSeconds: Int) {
        self.hours = hours
        self.firstSeconds = firstSeconds
    }
}

enum WebhookStore {
    static func add(url: String, types: [EventType]?, secret: [UInt8], operator name: String,
                    on connection: Connection) throws -> Int64 {
        let types = types.map { $0.map(\.rawValue) } ?? ["*"]
        return try connection.prepared("""
            SELECT wallet.add_webhook(\(url), \(types)::text[], \(ByteA(secret)), \(name))
            """)[0].decode(Int64.self, at: 0)
    }

    static func setEnabled(id: Int64, enabled: Bool, operator name: String, on connection: Connection) throws -> Bool {
        try connection.prepared("""
            SELECT wallet.set_webhook_enabled(\(id), \(enabled), \(name))
            """)[0].decode(Bool.self, at: 0)
    }

    static func endpoints(now: Date, on connection: Connection) throws -> [WebhookEndpoint] {
        try connection.prepared("""
            SELECT b.endpoint_id, b.url, array_to_string(e.event_types, ','), b.enabled, b.disabled_reason,
                   b.failing_since, b.pending, b.oldest_seconds
            FROM wallet.webhook_backlog(\(now)) b JOIN wallet.webhook_endpoints e ON e.id = b.endpoint_id
            ORDER BY b.endpoint_id
            """).map { row in
            let types = try row.decode(String.self, at: 2)
            return WebhookEndpoint(
                id: try row.decode(Int64.self, at: 0), url: try row.decode(String.self, at: 1),
                eventTypes: types == "*" ? nil : types.split(separator: ",").compactMap { EventType(rawValue: String($0)) },
                enabled: try row.decode(Bool.self, at: 3), disabledReason: try row.decodeIfPresent(String.self, at: 4),
                failingSince: try row.decodeIfPresent(Date.self, at: 5), pending: try row.decode(Int.self, at: 6),
                oldestUndeliveredSeconds: try row.decode(Double.self, at: 7))
        }
    }

    static func leaseBatch(now: Date, leaseSeconds: Int, limit: Int, on connection: Connection) throws -> WebhookBatch? {
        let rows = try connection.prepared("""
            SELECT endpoint_id, url, secret, through, event_id, type, user_id, currency, amount, balance_after, held,
                   available, entry_id, hold_id, flow_no, created_at, data, blocked
            FROM wallet.lease_webhook_batch(\(now), \(leaseSeconds), \(limit))
            """)
        guard let first = rows.first else { return nil }
        return WebhookBatch(
            endpointID: try first.decode(Int64.self, at: 0), url: try first.decode(String.self, at: 1),
            secret: try first.decode(ByteA.self, at: 2).bytes, through: try first.decode(Int64.self, at: 3),
            events: try rows.map { (try EventStore.event($0, at: 4), try $0.decode(Bool.self, at: 17)) })
    }

    static func finishBatch(_ batch: WebhookBatch, _ outcome: WebhookBatchOutcome, now: Date, retry: WebhookRetry,
                            on connection: Connection) throws {
        try connection.prepared("""
            SELECT wallet.finish_webhook_batch(\(batch.endpointID), \(batch.through), \(now),
                                               \(outcome.failed.map(\.eventID))::bigint[],
                                               \(outcome.failed.map(\.status))::integer[],
                                               \(outcome.failed.map(\.error))::text[], \(outcome.queued)::bigint[],
                                               \(outcome.delivered), \(retry.hours), \(retry.firstSeconds))
            """)
    }

    static func claim(now: Date, limit: Int, leaseSeconds: Int, on connection: Connection) throws -> [WebhookDelivery] {
        try connection.prepared("""
            SELECT endpoint_id, url, secret, attempts, event_id, type, user_id, currency, amount, balance_after, held,
                   available, entry_id, hold_id, flow_no, created_at, data
            FROM wallet.claim_webhook_deliveries(\(now), \(limit), \(leaseSeconds))
            """).map { row in
            // The event's columns start at its id; they are NULL when retention deleted it.
            WebhookDelivery(
                endpointID: try row.decode(Int64.self, at: 0), url: try row.decode(String.self, at: 1),
                secret: try row.decode(ByteA.self, at: 2).bytes, attempts: try row.decode(Int.self, at: 3),
                eventID: try row.decode(Int64.self, at: 4),
                event: try row.decodeIfPresent(String.self, at: 5) == nil ? nil : try EventStore.event(row, at: 4))
        }
    }

    static func record(endpointID: Int64, eventID: Int64, _ attempt: WebhookAttempt, now: Date, retry: WebhookRetry,
                       on connection: Connection) throws -> WebhookDeliveryStatus? {
        let status = try connection.prepared("""
            SELECT wallet.record_webhook_attempt(\(endpointID), \(eventID), \(attempt.delivered), \(attempt.status),
                                                 \(attempt.error), \(now), \(retry.hours), \(retry.firstSeconds),
                                                 \(attempt.giveUp))
            """)[0].decode(String.self, at: 0)
        return WebhookDeliveryStatus(rawValue: status)
    }

    static func purge(olderThanDays days: Int, limit: Int, on connection: Connection) throws -> Int {
        try connection.prepared("""
            SELECT wallet.purge_webhook_deliveries(now() - make_interval(days => \(days)), \(limit))
            """)[0].decode(Int.self, at: 0)
    }
}

extension Administration {
    /// Adds an endpoint receiving `types` (nil: every type) from the next
    /// event on, audited; returns its id.
    public func addWebhook(url: String, types: [EventType]?, secret: [UInt8], operator name: String) throws -> Int64 {
        try connection.withLocalSettings {
            try WebhookStore.add(url: url, types: types, secret: secret, operator: name, on: $0)
        }
    }

    /// Enables or disables an endpoint, audited; returns whether it changed.
    /// An unknown id is `WalletError.notFound`.
    public func setWebhookEnabled(id: Int64, enabled: Bool, operator name: String) throws -> Bool {
        do {
            return try connection.withLocalSettings {
                try WebhookStore.setEnabled(id: id, enabled: enabled, operator: name, on: $0)
            }
        } catch let error as PostgresError where error.sqlState == SQLState("WL002") {
            throw WalletError.notFound(detail: "no webhook endpoint \(id)")
        }
    }

    public func webhookEndpoints() throws -> [WebhookEndpoint] {
        try WebhookStore.endpoints(now: Date(), on: connection)
    }
}

extension Ledger {
    /// Leases an endpoint's next batch until `now` + `leaseSeconds`; nil
    /// when no endpoint has events to send.
    public func leaseWebhookBatch(now: Date, leaseSeconds: Int, limit: Int) throws -> WebhookBatch? {
        try writeBounded(.statement, pool: webhookPool, metrics: metrics, deadline: .now + .seconds(10)) {
            try WebhookStore.leaseBatch(now: now, leaseSeconds: leaseSeconds, limit: limit, on: $0)
        }
    }

    /// Ends a batch: rows for what failed or waits, the mark moved on.
    public func finishWebhookBatch(_ batch: WebhookBatch, _ outcome: WebhookBatchOutcome, now: Date,
                                   retry: WebhookRetry) throws {
        try writeBounded(.statement, pool: webhookPool, metrics: metrics, deadline: .now + .seconds(10)) {
            try WebhookStore.finishBatch(batch, outcome, now: now, retry: retry, on: $0)
        }
    }

    /// Leases up to `limit` due deliveries, the first of each player's for
    /// each endpoint, until `now` + `leaseSeconds`.
    public func claimWebhookDeliveries(now: Date, limit: Int, leaseSeconds: Int) throws -> [WebhookDelivery] {
        try writeBounded(.statement, pool: webhookPool, metrics: metrics, deadline: .now + .seconds(10)) {
            try WebhookStore.claim(now: now, limit: limit, leaseSeconds: leaseSeconds, on: $0)
        }
    }

    /// Records an attempt; returns the delivery's status, nil when it was
    /// no longer pending.
    public func recordWebhookAttempt(_ delivery: WebhookDelivery, _ attempt: WebhookAttempt, now: Date,
                                     retry: WebhookRetry) throws -> WebhookDeliveryStatus? {
        try writeBounded(.statement, pool: webhookPool, metrics: metrics, deadline: .now + .seconds(10)) {
            try WebhookStore.record(endpointID: delivery.endpointID, eventID: delivery.eventID, attempt, now: now,
                                    retry: retry, on: $0)
        }
    }

    /// Every endpoint with its backlog at `now`.
    public func webhookEndpoints(now: Date) throws -> [WebhookEndpoint] {
        try webhookPool.withConnection(deadline: .now + .seconds(5)) { try WebhookStore.endpoints(now: now, on: $0) }
    }

    /// Deletes up to `limit` finished deliveries older than `days`.
    public func purgeWebhookDeliveries(olderThanDays days: Int, limit: Int) throws -> Int {
        try writeBounded(.statement, pool: webhookPool, metrics: metrics, deadline: .now + .seconds(10)) {
            try WebhookStore.purge(olderThanDays: days, limit: limit, on: $0)
        }
    }
}
