-- wallet.debit_many, re-applied by the migrator whenever this file changes
-- (first defined in 0002_credits_and_debits.sql; typed in 0007; posted
-- through wallet.post_entries since 0017).
--
-- Lock order, everywhere: flowNO locks first (debits take none), then
-- wallet rows in (user_id, currency) order (wallet.lock_batch_wallets), then
-- credit or hold rows (debits take none).

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
    v_count    INTEGER := coalesce(cardinality(p_requests), 0);
    v_states   wallet.debit_state[];
    v_wallets  wallet.batch_wallet[];
    op_wallet  INTEGER[];
    -- The answers, one per request; what the batch posts; and per request,
    -- the posting of the debit it made or replays from earlier in the batch.
    v_results  wallet.debit_result[] := array_fill(NULL::wallet.debit_result, ARRAY[v_count]);
    v_postings wallet.posting[] := '{}';
    op_posting INTEGER[] := array_fill(NULL::INTEGER, ARRAY[v_count]);
    -- By first request of a key: the request whose outcome the batch stores.
    g_stored   INTEGER[] := array_fill(NULL::INTEGER, ARRAY[v_count]);
    r          wallet.debit_request;
    s          wallet.debit_state;
    v_earlier  INTEGER;
    v_wallet   wallet.batch_wallet;
    -- An answer decided now, set field by field (cheaper than a call each).
    v_result   wallet.debit_result := wallet.debit_refused(NULL);
BEGIN
    IF EXISTS (SELECT 1 FROM unnest(p_requests) q WHERE q.amount IS NULL OR q.amount NOT BETWEEN 1 AND 1000000000000) THEN
        RAISE EXCEPTION 'debit_many: amount out of range' USING ERRCODE = 'WL003';
    ELSIF v_count = 0 THEN
        RETURN;
    END IF;
    SELECT l.wallets, l.op_wallet INTO v_wallets, op_wallet
    FROM wallet.lock_batch_wallets(
        ARRAY(SELECT ROW(q.user_id, q.currency)::wallet.wallet_key
              FROM unnest(p_requests) WITH ORDINALITY q ORDER BY q.ordinality),
        FALSE) l;
    v_states := wallet.debit_states(p_requests);
    v_result.created_at := now();

    FOR i IN 1 .. v_count LOOP
        r := p_requests[i];
        s := v_states[i];
        v_earlier := g_stored[s.first];
        IF NOT s.currency_known THEN
            v_results[i] := wallet.debit_refused('unknown_currency');
        ELSIF (s.stored).key IS NOT NULL THEN
            -- A key with a stored outcome: replay it, or refuse another request.
            v_results[i] := wallet.debit_replay(s.stored, r.request_hash);
        ELSIF v_earlier IS NOT NULL THEN
            -- The same, for a key decided earlier in this batch.
            v_results[i] := CASE WHEN (p_requests[v_earlier]).request_hash = r.request_hash
                                 THEN wallet.debit_replay(v_results[v_earlier])
                                 ELSE wallet.debit_refused('idempotency_key_reused') END;
            op_posting[i] := CASE WHEN (v_results[i]).replayed THEN op_posting[v_earlier] END;
        ELSE
            g_stored[s.first] := i;
            -- A wallet that does not exist has a balance of 0.
            v_wallet := coalesce(v_wallets[op_wallet[i]], ROW(r.user_id, r.currency, 0, FALSE, 0)::wallet.batch_wallet);
            -- Against what is available: the balance less its active holds.
            IF v_wallet.balance - v_wallet.held >= r.amount THEN
                v_wallet.balance := v_wallet.balance - r.amount;
                v_wallets[op_wallet[i]] := v_wallet;
                v_postings[cardinality(v_postings) + 1] := wallet.debit_posting(r);
                op_posting[i] := cardinality(v_postings);
                v_result.outcome := 'debited';
            ELSE
                v_result.outcome := 'insufficient_funds';
            END IF;
            v_result.balance := v_wallet.balance;
            v_result.held := v_wallet.held;
            v_result.request_id := r.request_id;
            v_results[i] := v_result;
        END IF;
    END LOOP;

    RETURN QUERY SELECT * FROM unnest(wallet.post_debits(p_requests, v_results, op_posting, v_postings));
END;
$$;

-- What wallet.debit_many reads about each request, in one query: the
-- outcome stored under its key, the first request of the batch with its
-- key, and whether its currency is one of the catalog's (read once a call).
CREATE OR REPLACE FUNCTION wallet.debit_states(p_requests wallet.debit_request[])
RETURNS wallet.debit_state[]
LANGUAGE plpgsql AS $$
DECLARE
    v_states wallet.debit_state[];
BEGIN
    SELECT array_agg(ROW(k, u.first, u.currency = ANY (ARRAY(SELECT c.code FROM wallet.currencies c)))
                         ::wallet.debit_state ORDER BY u.ord)
    INTO v_states
    FROM (SELECT q.client, q.key, q.currency, q.ordinality AS ord,
                 min(q.ordinality) OVER (PARTITION BY q.client, q.key)::INTEGER AS first
          FROM unnest(p_requests) WITH ORDINALITY q) u
    LEFT JOIN wallet.idempotency_keys k ON k.client = u.client AND k.key = u.key;
    RETURN v_states;
END;
$$;

-- A debit's posting: its amount taken from the wallet, under the key as
-- its reference, keeping the request's reason and metadata.
CREATE OR REPLACE FUNCTION wallet.debit_posting(p_request wallet.debit_request)
RETURNS wallet.posting
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    v_posting wallet.posting;
BEGIN
    v_posting.kind := 'debit';
    v_posting.user_id := p_request.user_id;
    v_posting.currency := p_request.currency;
    v_posting.amount := -p_request.amount;
    v_posting.reference := p_request.key;
    v_posting.client := p_request.client;
    IF p_request.reason IS NOT NULL OR p_request.metadata IS NOT NULL THEN
        v_posting.metadata := jsonb_strip_nulls(jsonb_build_object('reason', p_request.reason))
            || CASE WHEN p_request.metadata IS NULL THEN '{}'::JSONB
                    ELSE jsonb_build_object('metadata', p_request.metadata) END;
    END IF;
    RETURN v_posting;
END;
$$;

-- An answer that is not stored: unknown_currency, idempotency_key_reused.
CREATE OR REPLACE FUNCTION wallet.debit_refused(p_outcome TEXT)
RETURNS wallet.debit_result
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    v_result wallet.debit_result;
BEGIN
    v_result.outcome := p_outcome;
    v_result.replayed := FALSE;
    RETURN v_result;
END;
$$;

-- The answer stored under a key, replayed to a request with the same hash;
-- idempotency_key_reused for any other request. A debit stored by a release
-- before typed results replays its stored body.
CREATE OR REPLACE FUNCTION wallet.debit_replay(p_stored wallet.idempotency_keys, p_request_hash BYTEA)
RETURNS wallet.debit_result
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    v_result wallet.debit_result;
BEGIN
    IF p_stored.request_hash <> p_request_hash THEN
        RETURN wallet.debit_refused('idempotency_key_reused');
    END IF;
    v_result.outcome := p_stored.outcome;
    v_result.replayed := TRUE;
    v_result.entry_id := p_stored.entry_id;
    v_result.balance := p_stored.balance;
    v_result.created_at := p_stored.created_at;
    v_result.request_id := p_stored.request_id;
    v_result.stored_response := p_stored.response;
    v_result.held := coalesce(p_stored.held, 0);
    RETURN v_result;
END;
$$;

-- The same, for an answer decided earlier in the batch.
CREATE OR REPLACE FUNCTION wallet.debit_replay(p_earlier wallet.debit_result)
RETURNS wallet.debit_result
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    p_earlier.replayed := TRUE;
    RETURN p_earlier;
END;
$$;

-- Posts the batch's debits, names each answer's entry (`p_op_posting`
-- gives, per answer, its posting's place among `p_postings`), and keeps
-- each outcome decided now under its key: the debit (its entry, the balance
-- after it) or the sticky insufficient_funds (the balance that was too
-- low), with the wallet's active holds then. Returns the answers.
--
-- The key's primary key decides a race with another transaction: a key it
-- committed since the lookup fails this insert with a unique violation on
-- idempotency_keys_pkey, which the service treats as WL008. Not ON
-- CONFLICT DO NOTHING: its speculative insertion cost a 20-debit batch
-- about a tenth of its time.
CREATE OR REPLACE FUNCTION wallet.post_debits(p_requests wallet.debit_request[], p_results wallet.debit_result[],
                                              p_op_posting INTEGER[], p_postings wallet.posting[])
RETURNS wallet.debit_result[]
LANGUAGE plpgsql AS $$
DECLARE
    v_entries wallet.entries[] := wallet.post_entries(p_postings);
    v_result  wallet.debit_result;
    -- Whether any outcome was decided now (a batch of replays stores none).
    v_decided BOOLEAN := FALSE;
BEGIN
    FOR i IN 1 .. coalesce(cardinality(p_results), 0) LOOP
        v_result := p_results[i];
        v_decided := v_decided OR (NOT v_result.replayed AND v_result.outcome IN ('debited', 'insufficient_funds'));
        CONTINUE WHEN p_op_posting[i] IS NULL;
        v_result.entry_id := (v_entries[p_op_posting[i]]).id;
        p_results[i] := v_result;
    END LOOP;
    IF v_decided THEN
        INSERT INTO wallet.idempotency_keys (client, key, request_hash, outcome, request_id, entry_id, amount, balance,
                                             held)
        SELECT q.client, q.key, q.request_hash, a.outcome, q.request_id, a.entry_id, q.amount, a.balance, a.held
        FROM unnest(p_requests) WITH ORDINALITY q
        JOIN unnest(p_results) WITH ORDINALITY a ON a.ordinality = q.ordinality
        WHERE NOT a.replayed AND a.outcome IN ('debited', 'insufficient_funds');
    END IF;
    RETURN p_results;
END;
$$;
