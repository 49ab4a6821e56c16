import Foundation
import Postgres

/// What one run of the ledger check did (`wallet check`, the verifier).
public struct LedgerCheckRun: Sendable {
    public enum Mode: String, Sendable {
        /// Every rule over the whole ledger (wallet.check_invariants).
        case full
        /// The rules over what the events since the last checkpoint touched
        /// (wallet.check_changes).
        case incremental
    }

    public var mode: Mode
    /// One per broken rule; none when what was checked balances.
    public var violations: [InvariantViolation]
    /// Where the checkpoint stands after the run: the new one of a clean
    /// run, the previous one (nil if none) after violations.
    public var throughEventID: Int64?
    /// The last entry verified: the greatest entry id the checkpoint's
    /// events tell.
    public var throughEntryID: Int64?
    public var durationMilliseconds: Int64
}

/// The ledger check with checkpoints (Migrations/functions/21_incremental_check.sql).
enum LedgerCheck {
    /// Runs the check on `connection`, which must not be in a transaction:
    /// the bound is read in one statement and the check runs in a later
    /// one, whose snapshot sees every event up to the bound (the feed's
    /// rule, as in `EventStore.page`). Incremental from the last checkpoint
    /// unless `full` is set, there is none yet, or events after it were
    /// purged; a clean run stores a checkpoint through the bound. An
    /// incremental run checks at most `eventsMax` events' worth when given
    /// (the ids after the checkpoint up to it), and the next run goes on
    /// from there.
    static func run(full: Bool, eventsMax: Int64? = nil, on connection: Connection) throws -> LedgerCheckRun {
        precondition(!connection.isInTransaction, "the check reads its bound and checks in separate snapshots")
        let started = ContinuousClock.now
        guard let state = try connection.query("""
            SELECT wallet.events_visible_through(), h.purged_through, c.through_event_id, c.through_entry_id
            FROM wallet.events_horizon h
            LEFT JOIN LATERAL (SELECT x.through_event_id, x.through_entry_id FROM wallet.check_checkpoints x
                               ORDER BY x.id DESC LIMIT 1) c ON TRUE
            """).single else { throw LedgerStore.StoreError.unexpectedRowCount(0, 1) }
        let visible = try state.decode(Int64.self, at: 0)
        let purgedThrough = try state.decode(Int64.self, at: 1)
        let checkpoint = try state.decodeIfPresent(Int64.self, at: 2)
        let checkpointEntry = try state.decodeIfPresent(Int64.self, at: 3)
        // Events after the checkpoint that retention deleted can tell nothing.
        let mode: LedgerCheckRun.Mode = full || (checkpoint ?? -1) < purgedThrough ? .full : .incremental
        let after = checkpoint ?? 0
        let bound = mode == .incremental ? eventsMax.map { min(visible, after + $0) } ?? visible : visible
        let rows = switch mode {
        case .full: try connection.query("SELECT invariant, subject, detail FROM wallet.check_invariants()")
        case .incremental: try connection.query("""
            SELECT invariant, subject, detail FROM wallet.check_changes(\(after)::bigint, \(bound)::bigint)
            """)
        }
        let violations = try rows.map {
            InvariantViolation(invariant: try $0.decode(String.self, at: 0), subject: try $0.decode(String.self, at: 1),
                               detail: try $0.decode(String.self, at: 2))
        }
        let milliseconds = Int64((ContinuousClock.now - started) / .milliseconds(1))
        var run = LedgerCheckRun(mode: mode, violations: violations, throughEventID: checkpoint,
                                 throughEntryID: checkpointEntry, durationMilliseconds: milliseconds)
        // Nothing new since the checkpoint (another run may have stored a
        // later one meanwhile): no row, so an idle ledger adds none.
        guard violations.isEmpty, mode == .full || bound > after else { return run }
        run.throughEntryID = try connection.query("""
            SELECT wallet.store_check_checkpoint(\(after)::bigint, \(bound)::bigint, \(mode.rawValue)::text,
                                                 \(milliseconds)::bigint)
            """).single?.decode(Int64.self, at: 0)
        run.throughEventID = bound
        return run
    }
}

extension Administration {
    /// `wallet check`: incremental from the last checkpoint, or over the
    /// whole ledger with `full` (or when there is no usable checkpoint).
    public func checkLedger(full: Bool) throws -> LedgerCheckRun {
        try connection.withoutStatementTimeout { try LedgerCheck.run(full: full, on: $0) }
    }
}

extension Ledger {
    /// "wallchek": the verifier's advisory lock key, so one instance of a
    /// service checks at a time.
    public static let verifierLockKey: Int64 = 0x7761_6C6C_6368_656B

    /// At most this many events' worth a round: about 3 s of the database's
    /// time (the check costs about 150 µs per new entry), so a service
    /// writing more than a round's worth a minute is verified behind, as
    /// `wallet_verified_entry_id` shows, and catches up when it is quieter,
    /// instead of the check taking a share of the database that grows with
    /// the write rate.
    public static let verifierRoundEventsMax: Int64 = 20_000

    /// One verifier round: the check (incremental once a checkpoint exists)
    /// under the verifier's lock, on a session connection, with no
    /// statement timeout and at most `deadline`; nil when another instance
    /// holds the lock.
    public func verifyLedger(deadline: ContinuousClock.Instant) throws -> LedgerCheckRun? {
        try sessionPool.withConnection(deadline: .now + .seconds(5)) { connection in
            guard try connection.query("SELECT pg_try_advisory_lock(\(Self.verifierLockKey)::bigint)")[0]
                .decode(Bool.self, at: 0) else { return nil }
            connection.deadline = deadline
            defer {
                connection.deadline = .now + .seconds(5)
                _ = try? connection.query("SELECT pg_advisory_unlock(\(Self.verifierLockKey)::bigint)")
            }
            return try connection.withoutStatementTimeout {
                try LedgerCheck.run(full: false, eventsMax: Self.verifierRoundEventsMax, on: $0)
            }
        }
    }
}
