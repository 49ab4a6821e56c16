-- wallet.post_entries, the one place where money moves, re-applied by the
-- migrator whenever this file changes (its type, wallet.posting, is in
-- 0017_one_posting.sql).
--
-- Lock order, everywhere (01_lock_flow_nos.sql): flowNO locks, then
-- purchase-token locks, then wallet rows in (user_id, currency) order, then
-- credit or hold rows. Posting comes last: its caller has locked every
-- wallet it posts to, in that order, so the update here waits for nothing
-- and takes no lock out of turn.

-- A posting, named field by field: one movement of coins in one wallet,
-- with its signed amount.
CREATE OR REPLACE FUNCTION wallet.new_posting(
    p_kind TEXT, p_user_id TEXT, p_currency TEXT, p_amount BIGINT, p_reference TEXT, p_client TEXT,
    p_metadata JSONB DEFAULT NULL)
RETURNS wallet.posting
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    v_posting wallet.posting;
BEGIN
    v_posting.kind := p_kind;
    v_posting.user_id := p_user_id;
    v_posting.currency := p_currency;
    v_posting.amount := p_amount;
    v_posting.reference := p_reference;
    v_posting.client := p_client;
    v_posting.metadata := p_metadata;
    RETURN v_posting;
END;
$$;

-- Appends one ledger entry per posting and moves each wallet's balance by
-- the postings' sum; returns the entries as written, in posting order.
--
-- It is the only code that inserts into wallet.entries and the only code
-- that changes wallet.wallets.balance (a wallet's held coins are the hold
-- functions' own), so the ledger's shape is made here once: an entry's
-- balance_after is its wallet's balance before the call plus what was
-- posted to the wallet up to and including it, in posting order, and entry
-- ids are drawn in posting order, so a wallet's ids follow the order its
-- entries were applied. They are drawn after the caller locked the
-- wallets: an entry of another transaction on these wallets has a smaller
-- id (it committed before the lock was granted) or comes after this one
-- commits.
--
-- What may be posted is the caller's decision and the table's constraints'
-- (each kind has its sign; a debit never ends below zero). A posting to a
-- wallet that does not exist raises WL003: the caller makes wallets first.
-- Two statements however many postings: the balances' update and the
-- entries' insert. The planner settings are wallet.debit_many's, for the
-- same reasons, and pinned here because this function's plans are cached
-- once per connection, whoever calls it first.
CREATE OR REPLACE FUNCTION wallet.post_entries(p_postings wallet.posting[])
RETURNS wallet.entries[]
LANGUAGE plpgsql
SET enable_seqscan = off
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    -- A small map from each wallet posted to, to its balance as the
    -- postings go: array_position finds a wallet's place by its key as
    -- text, "user_id currency" (neither holds a space). Compared as a
    -- wallet_key composite instead, a batch of 13 debits took about an
    -- eighth more of PostgreSQL's time.
    v_wallets  TEXT[];
    v_balances BIGINT[];
    v_place    INTEGER;
    p          wallet.posting;
    v_entry    wallet.entries;
    v_entries  wallet.entries[] := '{}';
BEGIN
    IF coalesce(cardinality(p_postings), 0) = 0 THEN
        RETURN '{}';
    END IF;
    -- Each wallet moves once, by its postings' sum, and says what it held before.
    WITH moved AS (
        UPDATE wallet.wallets SET balance = balance + m.amount, updated_at = now()
        FROM (SELECT q.user_id, q.currency, sum(q.amount)::BIGINT AS amount FROM unnest(p_postings) q
              GROUP BY q.user_id, q.currency) m
        WHERE wallets.user_id = m.user_id AND wallets.currency = m.currency
        RETURNING wallets.user_id, wallets.currency, wallets.balance - m.amount AS opening
    )
    SELECT array_agg(moved.user_id || ' ' || moved.currency), array_agg(moved.opening)
    INTO v_wallets, v_balances
    FROM moved;
    v_entry.created_at := now();
    FOREACH p IN ARRAY p_postings LOOP
        v_place := array_position(v_wallets, p.user_id || ' ' || p.currency);
        IF v_place IS NULL THEN
            RAISE EXCEPTION 'post_entries: no wallet %/%', p.user_id, p.currency USING ERRCODE = 'WL003';
        END IF;
        v_balances[v_place] := v_balances[v_place] + p.amount;
        v_entry.id := nextval('wallet.entries_id_seq');
        v_entry.user_id := p.user_id;
        v_entry.currency := p.currency;
        v_entry.amount := p.amount;
        v_entry.balance_after := v_balances[v_place];
        v_entry.kind := p.kind;
        v_entry.reference := p.reference;
        v_entry.client := p.client;
        v_entry.metadata := p.metadata;
        v_entries[cardinality(v_entries) + 1] := v_entry;
    END LOOP;
    INSERT INTO wallet.entries (id, user_id, currency, amount, balance_after, kind, reference, client, created_at,
                                metadata)
    SELECT e.id, e.user_id, e.currency, e.amount, e.balance_after, e.kind, e.reference, e.client, e.created_at,
           e.metadata
    FROM unnest(v_entries) e;
    RETURN v_entries;
END;
$$;
