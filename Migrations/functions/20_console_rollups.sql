-- The console overview's rollups (tables in Migrations/0033_console_rollups.sql),
-- re-applied by the migrator whenever this file changes: the job that keeps
-- them, and the reads that add what the job has not reached yet.
--
-- The job follows the event log, not the ledger: every entry has exactly
-- one event (its balance.negative aside) written in the entry's own
-- transaction, and wallet.events_visible_through() gives an id up to which
-- every event that will ever exist has committed, so a watermark that only
-- moves up to it never passes an entry that commits late (ids are drawn
-- inside transactions that commit in any order). Nothing here runs inside
-- wallet.post_entries: the write path never waits on a rollup row.
--
-- Lock order: the job takes wallet.console_rollup_state's row first (one
-- step at a time, across instances; a step that finds it taken does
-- nothing), then writes only its own tables.
-- wallet.purge_events (14_keys_and_upkeep.sql) reads the watermark and
-- never deletes an event above it.

-- Adds the entries (and their credits) whose events have ids in
-- (p_from, p_through] to the daily rollups. Called by the job only, with
-- every event in that range committed.
CREATE OR REPLACE FUNCTION wallet.add_console_totals(p_from BIGINT, p_through BIGINT) RETURNS VOID
LANGUAGE sql AS $$
    WITH told AS (
        SELECT v.entry_id FROM wallet.events v
        WHERE v.id > p_from AND v.id <= p_through AND v.entry_id IS NOT NULL AND v.type <> 'balance.negative'
    ), entry_totals AS (
        INSERT INTO wallet.console_daily_entries AS t (day, currency, kind, amount, entries)
        SELECT (e.created_at AT TIME ZONE 'UTC')::DATE, e.currency, e.kind, sum(e.amount), count(*)
        FROM told JOIN wallet.entries e ON e.id = told.entry_id
        GROUP BY 1, 2, 3
        ON CONFLICT (day, currency, kind)
            DO UPDATE SET amount = t.amount + EXCLUDED.amount, entries = t.entries + EXCLUDED.entries
    )
    INSERT INTO wallet.console_daily_purchases AS t (day, currency, purchases)
    SELECT (c.created_at AT TIME ZONE 'UTC')::DATE, c.currency, count(*)
    FROM told JOIN wallet.credits c ON c.entry_id = told.entry_id
    GROUP BY 1, 2
    ON CONFLICT (day, currency) DO UPDATE SET purchases = t.purchases + EXCLUDED.purchases;
$$;

-- Keeps a balance list (wallet.console_balance_lists) true after the
-- events in (p_from, p_through], which have all committed.
--
-- Why this is exact: a wallet that is not a candidate ranked after the
-- threshold when the list was worked out, and its balance changes only
-- with an event. So after a run, the candidates and the wallets these
-- events touched that still rank at or before the threshold (read now)
-- are every wallet that does; any other wallet's balance is what it was
-- then, or changed by an event above p_through that the console reads
-- itself (every change this statement did not see is such an event).
-- When more than 100 qualify, the list keeps the best 100 and the 100th
-- becomes the threshold (everything dropped ranks after it). When fewer
-- than 20 qualify (the console needs 10; the rest is slack for changes
-- between runs), the list is worked out afresh from wallet.wallets, once.
-- An index on wallets.balance would do without this, but would make every
-- balance update touch an index (no HOT update) and slow every debit.
CREATE OR REPLACE FUNCTION wallet.keep_balance_list(p_list TEXT, p_from BIGINT, p_through BIGINT) RETURNS VOID
LANGUAGE plpgsql
SET enable_hashjoin = off
SET enable_mergejoin = off
SET plan_cache_mode = force_custom_plan
AS $$
DECLARE
    v_list  wallet.console_balance_lists;
    v_keep  wallet.wallets[];
BEGIN
    SELECT * INTO STRICT v_list FROM wallet.console_balance_lists WHERE list = p_list;
    SELECT coalesce(array_agg(w ORDER BY v_list.sign * w.balance, w.user_id, w.currency), '{}') INTO v_keep
    FROM wallet.wallets w
    WHERE (w.user_id, w.currency) IN (
              SELECT c.user_id, c.currency FROM wallet.console_balance_candidates c WHERE c.list = p_list
              UNION
              SELECT v.user_id, v.currency FROM wallet.events v WHERE v.id > p_from AND v.id <= p_through)
      AND v_list.sign * w.balance < 0
      AND (v_list.threshold_key IS NULL
           OR (v_list.sign * w.balance, w.user_id, w.currency)
              <= (v_list.threshold_key, v_list.threshold_user_id COLLATE "C", v_list.threshold_currency COLLATE "C"));
    IF v_list.threshold_key IS NOT NULL AND cardinality(v_keep) < 20 THEN
        -- Worked out afresh: every wallet in the list's range is ranked.
        v_keep := ARRAY(SELECT w FROM wallet.wallets w WHERE v_list.sign * w.balance < 0
                        ORDER BY v_list.sign * w.balance, w.user_id, w.currency LIMIT 100);
        v_list.threshold_key := NULL;
    END IF;
    -- Fewer than 100 keep the threshold they have (none after a fresh
    -- look: then every wallet in range is a candidate).
    IF cardinality(v_keep) >= 100 THEN
        v_keep := v_keep[1:100];
        v_list.threshold_key := v_list.sign * (v_keep[100]).balance;
        v_list.threshold_user_id := (v_keep[100]).user_id;
        v_list.threshold_currency := (v_keep[100]).currency;
    END IF;
    UPDATE wallet.console_balance_lists
    SET threshold_key = v_list.threshold_key, computed_at = now(),
        threshold_user_id = CASE WHEN v_list.threshold_key IS NOT NULL THEN v_list.threshold_user_id END,
        threshold_currency = CASE WHEN v_list.threshold_key IS NOT NULL THEN v_list.threshold_currency END
    WHERE list = p_list;
    DELETE FROM wallet.console_balance_candidates c WHERE c.list = p_list;
    INSERT INTO wallet.console_balance_candidates (list, user_id, currency)
    SELECT p_list, k.user_id, k.currency FROM unnest(v_keep) k;
END;
$$;

-- One step of the job: rolls up at most `p_limit` events past the
-- watermark, none past wallet.events_visible_through(), keeps the balance
-- lists, and moves the watermark, all in the caller's transaction; returns
-- how many events it took. Run in READ COMMITTED (each statement sees what
-- committed before it), which is how the service calls it.
CREATE OR REPLACE FUNCTION wallet.roll_up_console(p_limit INTEGER) RETURNS INTEGER
LANGUAGE plpgsql
SET plan_cache_mode = force_custom_plan
AS $$
DECLARE
    v_from    BIGINT;
    v_visible BIGINT;
    v_through BIGINT;
    v_taken   INTEGER;
BEGIN
    -- First the lock, so the bound below is read after an earlier step's
    -- commit. A step of another instance holding it has this one's work in
    -- hand: nothing to do (and no wait past the writers' lock timeout).
    SELECT s.rolled_through INTO v_from FROM wallet.console_rollup_state s FOR UPDATE SKIP LOCKED;
    IF NOT FOUND THEN
        RETURN 0;
    END IF;
    v_visible := wallet.events_visible_through();
    SELECT max(t.id), count(*) INTO v_through, v_taken
    FROM (SELECT v.id FROM wallet.events v WHERE v.id > v_from AND v.id <= v_visible ORDER BY v.id LIMIT p_limit) t;
    -- No event to take: everything up to the bound is taken (ids with no
    -- event are gaps or rolled back); a full step stops at its last event.
    v_through := CASE WHEN v_taken < p_limit THEN greatest(v_from, v_visible) ELSE v_through END;
    IF v_through > v_from THEN
        PERFORM wallet.add_console_totals(v_from, v_through);
    END IF;
    PERFORM wallet.keep_balance_list(l.list, v_from, v_through) FROM wallet.console_balance_lists l ORDER BY l.list;
    UPDATE wallet.console_rollup_state SET rolled_through = v_through, rolled_at = now();
    RETURN v_taken;
END;
$$;

-- The planner settings of the reads below and of wallet.keep_balance_list:
-- what is above the watermark is short (a minute of writes), and each of
-- its entries, credits and wallets is best fetched by its key. Left to
-- itself, the planner hashed the window's entries instead (650,000 rows
-- read for 20,000 events: 1.1 s where the lookups take 30 ms).

-- The overview's totals since `p_since` (a UTC day): the rollups and the
-- entries whose events are above the watermark, in one snapshot (a STABLE
-- function's statements share the calling statement's), so the job moving
-- the watermark between them cannot count an entry twice or not at all.
-- One row per day and kind (currencies added together), and per day the
-- purchases (kind NULL, in `entries`).
CREATE OR REPLACE FUNCTION wallet.console_totals(p_since DATE)
RETURNS TABLE (day DATE, kind TEXT, amount NUMERIC, entries BIGINT)
LANGUAGE plpgsql STABLE
SET enable_hashjoin = off
SET enable_mergejoin = off
SET plan_cache_mode = force_custom_plan
AS $$
DECLARE
    v_from  BIGINT := (SELECT s.rolled_through FROM wallet.console_rollup_state s);
    v_start TIMESTAMPTZ := p_since::TIMESTAMP AT TIME ZONE 'UTC';
BEGIN
    RETURN QUERY
    WITH tail AS MATERIALIZED (
        SELECT e.id, e.created_at, e.kind, e.amount
        FROM wallet.events v JOIN wallet.entries e ON e.id = v.entry_id
        WHERE v.id > v_from AND v.entry_id IS NOT NULL AND v.type <> 'balance.negative'
    ), rows AS (
        SELECT d.day, d.kind, d.amount, d.entries FROM wallet.console_daily_entries d WHERE d.day >= p_since
        UNION ALL
        SELECT (t.created_at AT TIME ZONE 'UTC')::DATE, t.kind, t.amount::NUMERIC, 1::BIGINT
        FROM tail t WHERE t.created_at >= v_start
        UNION ALL
        SELECT p.day, NULL, 0, p.purchases FROM wallet.console_daily_purchases p WHERE p.day >= p_since
        UNION ALL
        -- (a credit row names one of its credit entries)
        SELECT (c.created_at AT TIME ZONE 'UTC')::DATE, NULL, 0, 1
        FROM tail t JOIN wallet.credits c ON c.entry_id = t.id WHERE t.kind = 'credit' AND c.created_at >= v_start
    )
    SELECT r.day, r.kind, sum(r.amount), sum(r.entries)::BIGINT FROM rows r GROUP BY r.day, r.kind;
END;
$$;

-- The ten wallets of a balance list (largest balances, or most negative),
-- as `SELECT ... FROM wallet.wallets ORDER BY ... LIMIT 10` gives them now:
-- the candidates and the wallets touched by events above the watermark,
-- read in one snapshot (see wallet.keep_balance_list for why they hold
-- every wallet ranking at or before the threshold). When fewer than ten
-- of them qualify and the list is not every wallet in range (the job has
-- not run yet, or changes since its last run moved candidates out), it
-- scans wallet.wallets instead, as the overview always did.
CREATE OR REPLACE FUNCTION wallet.console_balances(p_list TEXT)
RETURNS TABLE (user_id TEXT, currency TEXT, balance BIGINT)
LANGUAGE plpgsql STABLE
SET enable_hashjoin = off
SET enable_mergejoin = off
SET plan_cache_mode = force_custom_plan
AS $$
DECLARE
    v_list wallet.console_balance_lists;
    v_from BIGINT := (SELECT s.rolled_through FROM wallet.console_rollup_state s);
    v_top  wallet.wallets[];
BEGIN
    SELECT * INTO STRICT v_list FROM wallet.console_balance_lists l WHERE l.list = p_list;
    -- The wallets touched above the watermark are narrowed by their last
    -- event's balance first (a wallet's last event shows it as it is:
    -- check_invariants' events_end_at_wallet), so only those that may
    -- qualify are read from wallet.wallets.
    v_top := ARRAY(
        SELECT w FROM wallet.wallets w
        WHERE (w.user_id, w.currency) IN (
                  SELECT c.user_id, c.currency FROM wallet.console_balance_candidates c WHERE c.list = p_list
                  UNION
                  SELECT t.user_id, t.currency
                  FROM (SELECT DISTINCT ON (v.user_id, v.currency) v.user_id, v.currency, v.balance_after
                        FROM wallet.events v WHERE v.id > v_from ORDER BY v.user_id, v.currency, v.id DESC) t
                  WHERE v_list.sign * t.balance_after < 0
                    AND (v_list.threshold_key IS NULL
                         OR (v_list.sign * t.balance_after, t.user_id, t.currency)
                            <= (v_list.threshold_key, v_list.threshold_user_id COLLATE "C",
                                v_list.threshold_currency COLLATE "C")))
          AND v_list.sign * w.balance < 0
          AND (v_list.threshold_key IS NULL
               OR (v_list.sign * w.balance, w.user_id, w.currency)
                  <= (v_list.threshold_key, v_list.threshold_user_id COLLATE "C", v_list.threshold_currency COLLATE "C"))
        ORDER BY v_list.sign * w.balance, w.user_id, w.currency LIMIT 10);
    -- The negative list is exactly the wallets below zero; the largest one
    -- shows zero and negative balances too when fewer than ten are above.
    IF cardinality(v_top) = 10 OR (v_list.threshold_key IS NULL AND p_list = 'negative') THEN
        RETURN QUERY SELECT t.user_id, t.currency, t.balance FROM unnest(v_top) t;
    ELSIF p_list = 'negative' THEN
        RETURN QUERY SELECT w.user_id, w.currency, w.balance FROM wallet.wallets w
                     WHERE w.balance < 0 ORDER BY w.balance, w.user_id, w.currency LIMIT 10;
    ELSE
        RETURN QUERY SELECT w.user_id, w.currency, w.balance FROM wallet.wallets w
                     ORDER BY w.balance DESC, w.user_id, w.currency LIMIT 10;
    END IF;
END;
$$;
