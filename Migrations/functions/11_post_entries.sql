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
-- balance_after is its wallet's balance before the batch plus what was
-- posted to the wallet up to and including it, in posting order, and its
-- id is drawn in posting order, so a wallet's ids follow the order its
-- entries were applied. The ids are drawn after the caller locked the
-- wallets: an entry of another transaction on these wallets has a smaller
-- id (it committed before the lock was granted) or comes after this one
-- commits. nextval() in the output list is evaluated after the ORDER BY,
-- as PostgreSQL documents for output expressions not referenced by it
-- (SELECT, "The SELECT List").
--
-- What may be posted is the caller's decision and the table's constraints'
-- (each kind has its sign; a debit never ends below zero). A posting to a
-- wallet that does not exist raises WL003: the caller makes wallets first.
-- One statement, however many postings. The planner settings are
-- wallet.debit_many's, for the same reasons, and pinned here because this
-- function's plans are cached once per connection whoever calls it.
CREATE OR REPLACE FUNCTION wallet.post_entries(p_postings wallet.posting[])
RETURNS wallet.entries[]
LANGUAGE plpgsql
SET enable_seqscan = off
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    v_entries wallet.entries[];
BEGIN
    IF coalesce(cardinality(p_postings), 0) = 0 THEN
        RETURN '{}';
    END IF;
    WITH moved AS (
        UPDATE wallet.wallets SET balance = balance + m.amount, updated_at = now()
        FROM (SELECT p.user_id, p.currency, sum(p.amount)::BIGINT AS amount FROM unnest(p_postings) p
              GROUP BY p.user_id, p.currency) m
        WHERE wallets.user_id = m.user_id AND wallets.currency = m.currency
        RETURNING wallets.user_id, wallets.currency, wallets.balance - m.amount AS opening
    ), appended AS (
        INSERT INTO wallet.entries (id, user_id, currency, amount, balance_after, kind, reference, client, metadata)
        SELECT nextval('wallet.entries_id_seq'), p.user_id, p.currency, p.amount,
               m.opening + (sum(p.amount) OVER (PARTITION BY p.user_id, p.currency ORDER BY p.ord))::BIGINT,
               p.kind, p.reference, p.client, p.metadata
        FROM unnest(p_postings) WITH ORDINALITY AS p(user_id, currency, kind, amount, reference, client, metadata, ord)
        JOIN moved m ON m.user_id = p.user_id AND m.currency = p.currency
        ORDER BY p.ord
        RETURNING *
    )
    SELECT array_agg(a::wallet.entries ORDER BY a.id) INTO v_entries FROM appended a;
    IF coalesce(cardinality(v_entries), 0) <> cardinality(p_postings) THEN
        RAISE EXCEPTION 'post_entries: a posting names a wallet that does not exist' USING ERRCODE = 'WL003';
    END IF;
    RETURN v_entries;
END;
$$;
