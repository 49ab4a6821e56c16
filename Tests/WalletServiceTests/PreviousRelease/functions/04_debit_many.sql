-- wallet.debit_many, re-applied by the migrator whenever this file changes
-- (first defined in 0002_credits_and_debits.sql; typed in 0007).
--
-- Lock order, everywhere: flowNO locks first (debits take none), then
-- wallet rows in (user_id, currency) order, then credit rows.

-- Spends coins under an idempotency key per API client, one result per
-- request, in order. The outcome of a request is what it would be applied
-- alone, one after another in batch order, duplicates included.
--
-- Outcomes: debited, insufficient_funds (both stored under the key and
-- replayed for a retry with the same request), idempotency_key_reused (the
-- key was used for another request), unknown_currency.
--
-- Planner settings, for this call and the functions it calls:
-- - enable_seqscan is off because plans are cached per connection: when the
--   key table was analyzed while empty, the cached plan looked keys up with
--   a sequential scan and every debit slowed as the table grew (the
--   hot-wallet benchmark fell to a tenth of its speed) until autovacuum
--   analyzed it again.
-- - plan_cache_mode is force_generic_plan because the statements here take
--   arrays, for which the planner keeps preferring a custom plan: every call
--   planned every statement again, about 0.35 ms a call (one-debit calls ran
--   at 1,316/s with re-planning and 2,570/s without; 32-debit calls at 808/s
--   and 870/s).
CREATE OR REPLACE FUNCTION wallet.debit_many(p_requests wallet.debit_request[])
RETURNS SETOF wallet.debit_result
LANGUAGE plpgsql
SET enable_seqscan = off
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    v_count     INTEGER := coalesce(cardinality(p_requests), 0);
    -- The request at hand, and what the loop works out for it.
    r           wallet.debit_request;
    v_stored    wallet.idempotency_keys;
    v_earlier   INTEGER;
    v_wallet    wallet.batch_wallet;
    v_result    wallet.debit_result;
    v_entry_id  BIGINT;
    v_written   INTEGER;
    v_known     TEXT[];
    -- Per request, read in one query: the outcome stored under its key, and
    -- the first request of the batch with the same key; then its wallet's
    -- number among the locked ones.
    op_stored   wallet.idempotency_keys[];
    op_first    INTEGER[];
    op_wallet   INTEGER[];
    v_wallets   wallet.batch_wallet[];
    -- By first request of a key: the request whose outcome the batch stores.
    g_stored    INTEGER[] := array_fill(NULL::INTEGER, ARRAY[v_count]);
    -- The answers, and what the batch writes: outcomes to store, and ledger
    -- entries.
    v_results   wallet.debit_result[] := array_fill(NULL::wallet.debit_result, ARRAY[v_count]);
    v_keys      wallet.idempotency_keys[] := '{}';
    v_entries   wallet.entries[] := '{}';
BEGIN
    IF EXISTS (SELECT 1 FROM unnest(p_requests) q WHERE q.amount IS NULL OR q.amount NOT BETWEEN 1 AND 1000000000000) THEN
        RAISE EXCEPTION 'debit_many: amount out of range' USING ERRCODE = 'WL003';
    ELSIF v_count = 0 THEN
        RETURN;
    END IF;
    v_known := ARRAY(SELECT DISTINCT p.currency FROM wallet.products p);

    SELECT l.wallets, l.op_wallet INTO v_wallets, op_wallet
    FROM wallet.lock_batch_wallets(
        ARRAY(SELECT ROW(q.user_id, q.currency)::wallet.wallet_key
              FROM unnest(p_requests) WITH ORDINALITY q ORDER BY q.ordinality),
        FALSE) l;

    SELECT array_agg(k ORDER BY u.ord), array_agg(u.first ORDER BY u.ord)
    INTO op_stored, op_first
    FROM (SELECT q.client, q.key, q.ordinality AS ord,
                 min(q.ordinality) OVER (PARTITION BY q.client, q.key)::INTEGER AS first
          FROM unnest(p_requests) WITH ORDINALITY q) u
    LEFT JOIN wallet.idempotency_keys k ON k.client = u.client AND k.key = u.key;

    FOR i IN 1 .. v_count LOOP
        r := p_requests[i];
        v_stored := op_stored[i];
        v_earlier := g_stored[op_first[i]];
        IF NOT r.currency = ANY (v_known) THEN
            v_results[i] := ROW('unknown_currency', FALSE, NULL, NULL, NULL, NULL, NULL, NULL)::wallet.debit_result;
        ELSIF v_stored.key IS NOT NULL THEN
            -- A key with a stored outcome: replay it, or refuse another request.
            IF v_stored.request_hash = r.request_hash THEN
                v_results[i] := ROW(v_stored.outcome, TRUE, v_stored.entry_id, v_stored.balance, v_stored.created_at,
                                    v_stored.request_id, v_stored.response, coalesce(v_stored.held, 0))::wallet.debit_result;
            ELSE
                v_results[i] := ROW('idempotency_key_reused', FALSE, NULL, NULL, NULL, NULL, NULL, NULL)::wallet.debit_result;
            END IF;
        ELSIF v_earlier IS NOT NULL THEN
            -- The same, for a key decided earlier in this batch.
            IF (p_requests[v_earlier]).request_hash = r.request_hash THEN
                v_result := v_results[v_earlier];
                v_result.replayed := TRUE;
                v_results[i] := v_result;
            ELSE
                v_results[i] := ROW('idempotency_key_reused', FALSE, NULL, NULL, NULL, NULL, NULL, NULL)::wallet.debit_result;
            END IF;
        ELSE
            g_stored[op_first[i]] := i;
            -- A wallet that does not exist has a balance of 0.
            v_wallet := CASE WHEN op_wallet[i] IS NULL THEN ROW(r.user_id, r.currency, 0, FALSE, 0)::wallet.batch_wallet
                             ELSE v_wallets[op_wallet[i]] END;
            -- Against what is available: the balance less its active holds.
            IF v_wallet.balance - v_wallet.held >= r.amount THEN
                v_wallet.balance := v_wallet.balance - r.amount;
                v_wallet.changed := TRUE;
                v_wallets[op_wallet[i]] := v_wallet;
                -- Drawn while the wallet is locked, so ids follow the wallet's order.
                v_entry_id := nextval('wallet.entries_id_seq');
                v_results[i] := ROW('debited', FALSE, v_entry_id, v_wallet.balance, now(), r.request_id, NULL,
                                    v_wallet.held)::wallet.debit_result;
                -- Columns in the table's order.
                v_entries[cardinality(v_entries) + 1] := ROW(
                    v_entry_id, r.user_id, r.currency, -r.amount, v_wallet.balance, 'debit', r.key, r.client, now(),
                    CASE WHEN r.reason IS NOT NULL OR r.metadata IS NOT NULL THEN
                        jsonb_strip_nulls(jsonb_build_object('reason', r.reason))
                        || CASE WHEN r.metadata IS NULL THEN '{}'::JSONB
                                ELSE jsonb_build_object('metadata', r.metadata) END
                    END)::wallet.entries;
            ELSE
                v_results[i] := ROW('insufficient_funds', FALSE, NULL, v_wallet.balance, now(), r.request_id, NULL,
                                    v_wallet.held)::wallet.debit_result;
            END IF;
            v_result := v_results[i];
            -- Columns in the table's order.
            v_keys[cardinality(v_keys) + 1] := ROW(
                r.client, r.key, r.request_hash, v_result.outcome, NULL, r.request_id, v_result.entry_id, now(),
                r.amount, v_result.balance, NULL, v_result.held)::wallet.idempotency_keys;
        END IF;
    END LOOP;

    IF cardinality(v_keys) > 0 THEN
        -- The key's primary key decides a race with another transaction: a
        -- key it committed since the lookup above fails this insert with a
        -- unique violation on idempotency_keys_pkey, which the service
        -- treats as WL008. Not ON CONFLICT DO NOTHING: its speculative
        -- insertion cost a 20-debit batch about a tenth of its time.
        INSERT INTO wallet.idempotency_keys (client, key, request_hash, outcome, request_id, entry_id, amount, balance,
                                             held)
        SELECT k.client, k.key, k.request_hash, k.outcome, k.request_id, k.entry_id, k.amount, k.balance, k.held
        FROM unnest(v_keys) k;
        GET DIAGNOSTICS v_written = ROW_COUNT;
        PERFORM wallet.finish_batch('debit_many', v_written, cardinality(v_keys), v_wallets, v_entries);
    END IF;

    RETURN QUERY SELECT * FROM unnest(v_results);
END;
$$;
