-- The incremental ledger check, re-applied by the migrator whenever this
-- file changes (its table, wallet.check_checkpoints, is in
-- 0034_check_checkpoints.sql). `wallet check` and the service's verifier
-- call it through WalletStore (LedgerCheck.swift), which reads the bound
-- first and checks in a later statement.
--
-- What changed since a checkpoint is told by the events after it: every
-- change to a wallet has its event, written in the change's transaction
-- (wallet.post_entries), and every entry since events exist has exactly
-- one (check_invariants' entry_has_event). Events commit out of id order;
-- a caller that reads wallet.events_visible_through() in one statement and
-- checks in a later one sees every event up to that bound, so a change that
-- commits late is never behind a stored checkpoint.

-- The rules of wallet.invariant_violations over what the events in
-- (p_after, p_through] touched: their wallets (balance against the last
-- entry, held, lots, last event), their entries (each against the entry
-- before it, and told by one of those events), the credits and holds they
-- name, what their entries took from lots, and the idempotency records
-- written with their entries. A checking run's cost follows what was
-- written since p_after, not the touched wallets' or lots' histories.
-- STABLE: one snapshot, the calling statement's, for the scope and the
-- rules. The rules run as a one-off plan with the scope as constants
-- (EXECUTE ... USING), which is what lets the planner fold the rules'
-- `IS NULL OR` tests and use the indexes they name. Without JIT: the plan
-- is made once and run once, its cost estimate is large enough to turn JIT
-- on, and compiling the rules' expressions over the scope's arrays took
-- longer than the check (4.4 of 6 s for 1,000 new entries).
CREATE OR REPLACE FUNCTION wallet.check_changes(p_after BIGINT, p_through BIGINT)
RETURNS TABLE (invariant TEXT, subject TEXT, detail TEXT)
LANGUAGE plpgsql STABLE SET jit = off AS $$
DECLARE
    v_users      TEXT[];
    v_currencies TEXT[];
    v_entries    BIGINT[];
    v_flow_nos   TEXT[];
    v_holds      BIGINT[];
    v_since      TIMESTAMPTZ;
BEGIN
    -- An entry's event is written with it, at the same now(), and so is
    -- the idempotency record that names it: v_since bounds the records.
    SELECT coalesce(array_agg(DISTINCT v.user_id), '{}'), coalesce(array_agg(DISTINCT v.currency), '{}'),
           coalesce(array_agg(v.entry_id) FILTER (WHERE v.entry_id IS NOT NULL), '{}'),
           coalesce(array_agg(DISTINCT v.flow_no) FILTER (WHERE v.flow_no IS NOT NULL), '{}'),
           coalesce(array_agg(DISTINCT v.hold_id) FILTER (WHERE v.hold_id IS NOT NULL), '{}'),
           min(v.created_at) FILTER (WHERE v.entry_id IS NOT NULL)
    INTO v_users, v_currencies, v_entries, v_flow_nos, v_holds, v_since
    FROM wallet.events v
    WHERE v.id > p_after AND v.id <= p_through;
    RETURN QUERY EXECUTE
        'SELECT v.invariant, v.subject, v.detail
         FROM wallet.invariant_violations(p_users => $1, p_currencies => $2, p_entries => $3, p_flow_nos => $4,
                                          p_holds => $5, p_since => $6, p_events_after => $7) v'
        USING v_users, v_currencies, v_entries, v_flow_nos, v_holds, v_since, p_after;
END;
$$;

-- Stores a clean run's checkpoint: through `p_through` (the bound its
-- check read first), and through the greatest entry the events since the
-- last checkpoint (`p_after`) tell, or the last checkpoint's entry when
-- they tell none. Returns that entry id.
CREATE OR REPLACE FUNCTION wallet.store_check_checkpoint(p_after BIGINT, p_through BIGINT, p_mode TEXT,
                                                         p_duration_milliseconds BIGINT)
RETURNS BIGINT
LANGUAGE sql AS $$
    INSERT INTO wallet.check_checkpoints (through_event_id, through_entry_id, mode, duration_milliseconds)
    SELECT p_through,
           greatest(coalesce((SELECT c.through_entry_id FROM wallet.check_checkpoints c ORDER BY c.id DESC LIMIT 1), 0),
                    coalesce((SELECT max(v.entry_id) FROM wallet.events v WHERE v.id > p_after AND v.id <= p_through), 0)),
           p_mode, p_duration_milliseconds
    RETURNING through_entry_id;
$$;
