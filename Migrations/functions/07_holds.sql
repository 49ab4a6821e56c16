-- Holds, re-applied by the migrator whenever this file changes (the table
-- is in 0009_holds.sql; typed answers and one request composite per
-- operation since 0017_one_posting.sql).
--
-- Lock order, as everywhere (01_lock_flow_nos.sql): wallet rows in key
-- order, then hold rows (in id order). A hold's wallet and amount never
-- change, so they are read before the wallet is locked. Captures post
-- their debits through wallet.post_entries under those wallet locks.
--
-- Idempotency, as for debits: an operation's answer is stored under its key
-- (wallet.idempotency_keys, whose primary key is per API client and key),
-- and a request whose key has an answer gets that answer again, or
-- idempotency_key_reused when it is another request. Two transactions that
-- run the same key at once both find it free; the second to insert it fails
-- on the primary key (idempotency_keys_pkey) when the first commits, its
-- whole batch is undone, and the service runs its operations again one at
-- a time, when the key's answer is there to replay.
--
-- Outcomes of wallet.hold_many, per operation:
--   held, captured, released           done
--   insufficient_funds                 the available balance (or, for a
--                                      capture, the balance) is too low
--   hold_not_active                    the hold is captured, released or
--                                      expired
--   amount_exceeds_hold                a capture of more than the hold
--   not_found                          no such hold for this client
--   idempotency_key_reused             the key was used for another request
--   unknown_currency                   no product uses the currency
-- The first six are stored under the key and replayed; the last three are
-- not stored.

-- The sweeper: expires the due holds of up to `p_wallets` wallets, locking
-- them in key order as a batch does (wallet.lock_batch_wallets, which
-- expires their due holds); returns how many holds it expired.
CREATE OR REPLACE FUNCTION wallet.expire_holds(p_wallets INTEGER)
RETURNS INTEGER
LANGUAGE plpgsql AS $$
DECLARE
    v_keys  wallet.wallet_key[];
    v_count INTEGER;
BEGIN
    SELECT array_agg(ROW(d.user_id, d.currency)::wallet.wallet_key) INTO v_keys
    FROM (SELECT DISTINCT h.user_id, h.currency FROM wallet.holds h
          WHERE h.status = 'held' AND h.expires_at <= now()
          ORDER BY 1, 2 LIMIT p_wallets) d;
    IF v_keys IS NULL THEN
        RETURN 0;
    END IF;
    PERFORM wallet.lock_batch_wallets(v_keys, FALSE);
    -- What this transaction expired: now() is its start, the same for each.
    SELECT count(*) INTO v_count FROM wallet.holds h
    WHERE (h.user_id, h.currency) IN (SELECT k.user_id, k.currency FROM unnest(v_keys) k)
      AND h.status = 'expired' AND h.expired_at = now();
    RETURN v_count;
END;
$$;

-- A hold as a reader sees it now: one past its time is expired, at its
-- expires_at, whether or not the sweeper came by.
CREATE OR REPLACE FUNCTION wallet.hold_as_seen(p_hold wallet.holds)
RETURNS wallet.holds
LANGUAGE plpgsql STABLE AS $$
BEGIN
    IF p_hold.status = 'held' AND p_hold.expires_at <= now() THEN
        p_hold.status := 'expired';
        p_hold.expired_at := p_hold.expires_at;
    END IF;
    RETURN p_hold;
END;
$$;

-- A hold as the answer stored under a key showed it. A hold changes once,
-- from held, so only a placement's answer differs from the hold now: it
-- showed the hold held.
CREATE OR REPLACE FUNCTION wallet.hold_as_answered(p_hold wallet.holds, p_outcome TEXT)
RETURNS wallet.holds
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    IF p_outcome = 'held' THEN
        p_hold.status := 'held';
        p_hold.captured_amount := NULL;
        p_hold.captured_at := NULL;
        p_hold.entry_id := NULL;
        p_hold.released_at := NULL;
        p_hold.release_reason := NULL;
        p_hold.expired_at := NULL;
    END IF;
    RETURN p_hold;
END;
$$;

-- An answer: the outcome, the hold as it shows, and the wallet's balance
-- and active holds. Not yet stored, not a replay.
CREATE OR REPLACE FUNCTION wallet.hold_answer(
    p_outcome TEXT, p_request_id TEXT, p_hold wallet.holds DEFAULT NULL, p_balance BIGINT DEFAULT NULL,
    p_held BIGINT DEFAULT NULL)
RETURNS wallet.hold_result
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    v_result wallet.hold_result;
BEGIN
    v_result.outcome := p_outcome;
    v_result.replayed := FALSE;
    v_result.request_id := p_request_id;
    v_result.hold := p_hold;
    v_result.balance := p_balance;
    v_result.held := p_held;
    RETURN v_result;
END;
$$;

-- The answer stored under a key, replayed to a request with the same hash;
-- idempotency_key_reused for any other request. An answer of the previous
-- release that kept its body (a hold, capture or release) carries it, to
-- be sent as first sent.
CREATE OR REPLACE FUNCTION wallet.hold_replay(p_stored wallet.idempotency_keys, p_request_hash BYTEA)
RETURNS wallet.hold_result
LANGUAGE plpgsql STABLE AS $$
DECLARE
    v_hold   wallet.holds;
    v_result wallet.hold_result;
BEGIN
    IF p_stored.request_hash <> p_request_hash THEN
        RETURN wallet.hold_answer('idempotency_key_reused', NULL);
    END IF;
    IF p_stored.hold_id IS NOT NULL THEN
        SELECT * INTO v_hold FROM wallet.holds h WHERE h.id = p_stored.hold_id;
        v_hold := wallet.hold_as_answered(v_hold, p_stored.outcome);
    END IF;
    v_result := wallet.hold_answer(p_stored.outcome, p_stored.request_id, v_hold, p_stored.balance, p_stored.held);
    v_result.replayed := TRUE;
    v_result.stored_response := p_stored.response;
    RETURN v_result;
END;
$$;

-- What wallet.hold_many reads before it decides, in one query, per request:
-- the answer stored under its key, the first request of the batch with its
-- key and whether a product uses its currency (a placement's), and the
-- wallet it works on: a placement's own, or the wallet of the hold a
-- capture or release names (NULL when there is no such hold for its
-- client). A hold's wallet never changes, so it is read before the lock.
-- The first three are a wallet.debit_state, as wallet.debit_states reads
-- them for debits.
CREATE OR REPLACE FUNCTION wallet.hold_states(
    p_requests wallet.hold_request[], OUT states wallet.debit_state[], OUT wallets wallet.wallet_key[])
LANGUAGE plpgsql AS $$
BEGIN
    SELECT array_agg(ROW(k, u.first, u.currency = ANY (ARRAY(SELECT c.code FROM wallet.currencies c)))
                         ::wallet.debit_state ORDER BY u.ord),
           array_agg(CASE WHEN u.kind = 'place' THEN ROW(u.user_id, u.currency)::wallet.wallet_key
                          ELSE ROW(h.user_id, h.currency)::wallet.wallet_key END ORDER BY u.ord)
    INTO states, wallets
    FROM (SELECT q.kind, q.client, q.key, q.any_client, q.user_id, q.currency, q.hold_id, q.ordinality AS ord,
                 min(q.ordinality) OVER (PARTITION BY q.client, q.key)::INTEGER AS first
          FROM unnest(p_requests) WITH ORDINALITY q) u
    LEFT JOIN wallet.idempotency_keys k ON k.client = u.client AND k.key = u.key
    LEFT JOIN wallet.holds h ON u.kind <> 'place' AND h.id = u.hold_id AND (u.any_client OR h.client = u.client);
END;
$$;

-- The holds `p_ids`, locked in id order, as they are once locked; call with
-- their wallets locked (and their due holds expired).
CREATE OR REPLACE FUNCTION wallet.lock_batch_holds(p_ids BIGINT[])
RETURNS wallet.holds[]
LANGUAGE plpgsql AS $$
DECLARE
    v_holds wallet.holds[];
BEGIN
    SELECT coalesce(array_agg(l.h ORDER BY (l.h).id), '{}') INTO v_holds
    FROM (SELECT h FROM wallet.holds h WHERE h.id = ANY (p_ids) ORDER BY h.id FOR UPDATE) l;
    RETURN v_holds;
END;
$$;

-- A placement's answer, against its wallet as the batch has it: held, with
-- the new hold (its id drawn now; written with the batch), or
-- insufficient_funds when the available balance is too low.
CREATE OR REPLACE FUNCTION wallet.decide_placement(p_request wallet.hold_request, p_wallet wallet.batch_wallet)
RETURNS wallet.hold_result
LANGUAGE plpgsql AS $$
DECLARE
    r      wallet.hold_request := p_request;
    v_hold wallet.holds;
BEGIN
    IF p_wallet.balance - p_wallet.held < r.amount THEN
        RETURN wallet.hold_answer(p_outcome => 'insufficient_funds', p_request_id => r.request_id,
                                  p_balance => p_wallet.balance, p_held => p_wallet.held);
    END IF;
    v_hold.id := nextval('wallet.holds_id_seq');
    v_hold.client := r.client;
    v_hold.user_id := r.user_id;
    v_hold.currency := r.currency;
    v_hold.amount := r.amount;
    v_hold.status := 'held';
    v_hold.reason := r.reason;
    v_hold.metadata := r.metadata;
    v_hold.expires_at := now() + make_interval(secs => r.expires_in_seconds);
    v_hold.created_at := now();
    RETURN wallet.hold_answer(p_outcome => 'held', p_request_id => r.request_id, p_hold => v_hold,
                              p_balance => p_wallet.balance, p_held => p_wallet.held + r.amount);
END;
$$;

-- A capture's or release's answer, against its hold and wallet as the batch
-- has them: not_found (no such hold for this client), hold_not_active (it
-- is captured, released or expired), released; for a capture of up to the
-- held amount (all of it when the request names none), amount_exceeds_hold,
-- insufficient_funds (a capture is a debit: never below zero; the hold
-- stays held) or captured. A settled hold shows as it will be written.
CREATE OR REPLACE FUNCTION wallet.decide_settlement(
    p_request wallet.hold_request, p_hold wallet.holds, p_wallet wallet.batch_wallet)
RETURNS wallet.hold_result
LANGUAGE plpgsql AS $$
DECLARE
    v_result wallet.hold_result;
    v_amount BIGINT := coalesce(p_request.amount, p_hold.amount);
BEGIN
    IF p_hold.id IS NULL THEN
        RETURN wallet.hold_answer('not_found', NULL);
    END IF;
    v_result := wallet.hold_answer(NULL, p_request.request_id, p_hold, p_wallet.balance, p_wallet.held);
    IF p_hold.status <> 'held' THEN
        v_result.outcome := 'hold_not_active';
    ELSIF p_request.kind = 'release' THEN
        p_hold.status := 'released';
        p_hold.released_at := now();
        p_hold.release_reason := p_request.reason;
        v_result.outcome := 'released';
    ELSIF v_amount > p_hold.amount THEN
        v_result.outcome := 'amount_exceeds_hold';
    ELSIF p_wallet.balance < v_amount THEN
        v_result.outcome := 'insufficient_funds';
    ELSE
        p_hold.status := 'captured';
        p_hold.captured_amount := v_amount;
        p_hold.captured_at := now();
        v_result.outcome := 'captured';
        v_result.balance := p_wallet.balance - v_amount;
    END IF;
    IF v_result.outcome IN ('released', 'captured') THEN
        v_result.hold := p_hold;
        v_result.held := p_wallet.held - p_hold.amount;
    END IF;
    RETURN v_result;
END;
$$;

-- A capture's posting: its amount taken from the hold's wallet and the
-- hold's amount from its held coins, with the hold as its reference and its
-- reason and metadata.
CREATE OR REPLACE FUNCTION wallet.capture_posting(p_hold wallet.holds, p_client TEXT)
RETURNS wallet.posting
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    RETURN wallet.new_posting(
        p_kind => 'debit', p_user_id => p_hold.user_id, p_currency => p_hold.currency,
        p_amount => -p_hold.captured_amount, p_reference => 'hold:' || p_hold.id, p_client => p_client,
        p_metadata => jsonb_strip_nulls(jsonb_build_object('reason', p_hold.reason, 'metadata', p_hold.metadata,
                                                           'hold_id', p_hold.id)),
        p_held => -p_hold.amount, p_event => 'hold.captured', p_hold_id => p_hold.id,
        p_data => jsonb_build_object('hold_amount', p_hold.amount));
END;
$$;

-- A writer's batch of hold operations, one answer each, in order. The
-- outcome of a request is what it would be applied alone, one after
-- another in batch order, duplicates included, with two liberties a batch
-- of concurrent requests allows: a capture or release of a hold placed
-- earlier in the same batch finds no hold (as if it came first), and a
-- replay of an answer stored before the batch shows its hold as the batch
-- leaves it (as if it came last).
--
-- Set-based, as wallet.debit_many: one query reads every key and hold; the
-- batch's wallets are locked once in key order, their due holds expired
-- once, then the holds it settles, in id order; the decisions are made in
-- memory; then wallet.write_hold_batch posts, writes and stores once for
-- the batch. The planner settings are wallet.debit_many's, for its reasons.
CREATE OR REPLACE FUNCTION wallet.hold_many(p_requests wallet.hold_request[])
RETURNS SETOF wallet.hold_result
LANGUAGE plpgsql
SET enable_seqscan = off
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    v_count    INTEGER := coalesce(cardinality(p_requests), 0);
    v_states   wallet.debit_state[];
    v_keys     wallet.wallet_key[];
    v_wallets  wallet.batch_wallet[];
    op_wallet  INTEGER[];
    v_holds    wallet.holds[];
    v_hold_ids BIGINT[];
    -- Per request: its hold's place in v_holds, and its posting's in v_postings.
    op_hold    INTEGER[] := array_fill(NULL::INTEGER, ARRAY[v_count]);
    op_posting INTEGER[] := array_fill(NULL::INTEGER, ARRAY[v_count]);
    v_postings wallet.posting[] := '{}';
    v_results  wallet.hold_result[] := array_fill(NULL::wallet.hold_result, ARRAY[v_count]);
    -- By first request of a key: the request whose answer the batch stores.
    g_stored   INTEGER[] := array_fill(NULL::INTEGER, ARRAY[v_count]);
    r          wallet.hold_request;
    s          wallet.debit_state;
    v_wallet   wallet.batch_wallet;
    v_result   wallet.hold_result;
BEGIN
    PERFORM wallet.check_hold_requests(p_requests);
    IF v_count = 0 THEN
        RETURN;
    END IF;
    SELECT h.states, h.wallets INTO v_states, v_keys FROM wallet.hold_states(p_requests) h;
    SELECT l.wallets, l.op_wallet INTO v_wallets, op_wallet FROM wallet.lock_batch_wallets(v_keys, FALSE) l;
    v_holds := wallet.lock_batch_holds(ARRAY(SELECT q.hold_id FROM unnest(p_requests) WITH ORDINALITY q
                                             WHERE q.kind <> 'place' AND (v_keys[q.ordinality]).user_id IS NOT NULL));
    v_hold_ids := ARRAY(SELECT h.id FROM unnest(v_holds) h);
    FOR i IN 1 .. v_count LOOP
        r := p_requests[i];
        s := v_states[i];
        -- A key answered before the batch is replayed once the batch is written.
        CONTINUE WHEN (s.stored).key IS NOT NULL;
        IF g_stored[s.first] IS NOT NULL THEN
            v_results[i] := wallet.hold_repeat(v_results[g_stored[s.first]], v_holds[op_hold[g_stored[s.first]]],
                                               (p_requests[g_stored[s.first]]).request_hash = r.request_hash);
            op_hold[i] := CASE WHEN (v_results[i]).replayed THEN op_hold[g_stored[s.first]] END;
            CONTINUE;
        END IF;
        v_wallet := coalesce(v_wallets[op_wallet[i]], ROW(r.user_id, r.currency, 0, FALSE, 0)::wallet.batch_wallet);
        IF r.kind = 'place' THEN
            v_result := CASE WHEN s.currency_known THEN wallet.decide_placement(r, v_wallet)
                             ELSE wallet.hold_answer('unknown_currency', NULL) END;
        ELSE
            op_hold[i] := CASE WHEN (v_keys[i]).user_id IS NOT NULL THEN array_position(v_hold_ids, r.hold_id) END;
            v_result := wallet.decide_settlement(r, v_holds[op_hold[i]], v_wallet);
        END IF;
        v_results[i] := v_result;
        IF v_result.outcome NOT IN ('not_found', 'unknown_currency') THEN
            g_stored[s.first] := i;
        END IF;
        CONTINUE WHEN v_result.outcome NOT IN ('held', 'captured', 'released');
        v_wallets[op_wallet[i]] := ROW(v_wallet.user_id, v_wallet.currency, v_result.balance, TRUE, v_result.held);
        IF r.kind = 'place' THEN
            v_postings[cardinality(v_postings) + 1] := wallet.hold_posting('hold.placed', v_result.hold,
                                                                           r.amount);
        ELSE
            v_holds[op_hold[i]] := v_result.hold;
            v_postings[cardinality(v_postings) + 1] := CASE
                WHEN v_result.outcome = 'captured' THEN wallet.capture_posting(v_result.hold, r.client)
                ELSE wallet.hold_posting('hold.released', v_result.hold, -(v_result.hold).amount) END;
        END IF;
        op_posting[i] := cardinality(v_postings);
    END LOOP;
    v_results := wallet.write_hold_batch(p_requests, v_results, v_holds, op_hold, wallet.post_entries(v_postings),
                                         op_posting);
    RETURN QUERY SELECT * FROM unnest(wallet.hold_replays(p_requests, v_states, v_results));
END;
$$;

-- Refuses a batch with a request no caller should send (WL003): an unknown
-- kind, or a placement's amount or expiry out of range.
CREATE OR REPLACE FUNCTION wallet.check_hold_requests(p_requests wallet.hold_request[])
RETURNS VOID
LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM unnest(p_requests) q WHERE q.kind IS NULL OR q.kind NOT IN ('place', 'capture', 'release')) THEN
        RAISE EXCEPTION 'hold_many: unknown kind' USING ERRCODE = 'WL003';
    ELSIF EXISTS (SELECT 1 FROM unnest(p_requests) q
                  WHERE q.kind = 'place' AND (q.amount IS NULL OR q.amount NOT BETWEEN 1 AND 1000000000000
                        OR q.expires_in_seconds IS NULL OR q.expires_in_seconds NOT BETWEEN 1 AND 86400)) THEN
        RAISE EXCEPTION 'place_hold: amount or expiry out of range' USING ERRCODE = 'WL003';
    END IF;
END;
$$;

-- Writes what wallet.hold_many decided, given what its postings wrote
-- (`op_posting`: per request, its posting's place; wallet.post_entries has
-- moved the wallets' balances and held coins): the new holds, the settled
-- ones (a capture with its entry), and each answer decided now under its
-- key. Returns the answers, each captured hold they show with its entry.
--
-- The key's primary key decides a race with another transaction (see the
-- top of this file; not ON CONFLICT, for wallet.post_debits's reason).
CREATE OR REPLACE FUNCTION wallet.write_hold_batch(
    p_requests wallet.hold_request[], p_results wallet.hold_result[], p_holds wallet.holds[], op_hold INTEGER[],
    p_entries wallet.entries[], op_posting INTEGER[])
RETURNS wallet.hold_result[]
LANGUAGE plpgsql AS $$
BEGIN
    FOR i IN 1 .. cardinality(p_results) LOOP
        IF (p_results[i]).outcome = 'captured' AND NOT (p_results[i]).replayed THEN
            p_holds[op_hold[i]].entry_id := (p_entries[op_posting[i]]).id;
        END IF;
    END LOOP;
    -- A hold changes once, from held: an answer that shows it changed shows
    -- it as written.
    FOR i IN 1 .. cardinality(p_results) LOOP
        IF op_hold[i] IS NOT NULL AND ((p_results[i]).hold).status <> 'held' THEN
            p_results[i].hold := p_holds[op_hold[i]];
        END IF;
    END LOOP;
    INSERT INTO wallet.holds OVERRIDING SYSTEM VALUE
    SELECT (a.hold).* FROM unnest(p_results) a WHERE a.outcome = 'held' AND NOT a.replayed;
    UPDATE wallet.holds h
    SET status = n.status, captured_amount = n.captured_amount, captured_at = n.captured_at, entry_id = n.entry_id,
        released_at = n.released_at, release_reason = n.release_reason
    FROM unnest(p_holds) n
    WHERE h.id = n.id AND h.status = 'held' AND n.status <> 'held';
    INSERT INTO wallet.idempotency_keys (client, key, request_hash, outcome, request_id, entry_id, amount, balance,
                                         hold_id, held)
    SELECT q.client, q.key, q.request_hash, a.outcome, q.request_id,
           CASE WHEN a.outcome = 'captured' THEN (a.hold).entry_id END,
           CASE WHEN q.kind = 'release' THEN (a.hold).amount ELSE coalesce(q.amount, (a.hold).amount) END,
           a.balance, (a.hold).id, a.held
    FROM unnest(p_requests) WITH ORDINALITY q
    JOIN unnest(p_results) WITH ORDINALITY a ON a.ordinality = q.ordinality
    WHERE NOT a.replayed AND a.outcome NOT IN ('not_found', 'unknown_currency', 'idempotency_key_reused');
    RETURN p_results;
END;
$$;

-- An answer given earlier in the batch under the same key, repeated
-- (replayed) to the same request (`p_same`), showing its hold as the batch
-- has it now (`p_hold`, when the answer is about a hold the batch locked);
-- idempotency_key_reused for another request.
CREATE OR REPLACE FUNCTION wallet.hold_repeat(p_earlier wallet.hold_result, p_hold wallet.holds, p_same BOOLEAN)
RETURNS wallet.hold_result
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    IF NOT p_same THEN
        RETURN wallet.hold_answer('idempotency_key_reused', NULL);
    END IF;
    p_earlier.replayed := TRUE;
    IF p_hold.id IS NOT NULL THEN
        p_earlier.hold := p_hold;
    END IF;
    RETURN p_earlier;
END;
$$;

-- The answers wallet.hold_many left to the end: those stored under their
-- key before the batch, replayed as wallet.hold_replay gives them.
CREATE OR REPLACE FUNCTION wallet.hold_replays(p_requests wallet.hold_request[], p_states wallet.debit_state[],
                                               p_results wallet.hold_result[])
RETURNS wallet.hold_result[]
LANGUAGE plpgsql AS $$
BEGIN
    FOR i IN 1 .. cardinality(p_results) LOOP
        IF ((p_states[i]).stored).key IS NOT NULL THEN
            p_results[i] := wallet.hold_replay((p_states[i]).stored, (p_requests[i]).request_hash);
        END IF;
    END LOOP;
    RETURN p_results;
END;
$$;

-- An operator's release (Scripts/admin/holds.sql), audited. The key is the
-- audit's own, so a repeated run answers as the first did.
CREATE OR REPLACE FUNCTION wallet.admin_release_hold(p_hold_id BIGINT, p_reason TEXT, p_operator TEXT)
RETURNS TABLE (outcome TEXT, user_id TEXT, currency TEXT, amount BIGINT, status TEXT)
LANGUAGE plpgsql AS $$
DECLARE
    v_request wallet.hold_request;
    v_result  wallet.hold_result;
    v_hold    wallet.holds;
BEGIN
    IF p_reason IS NULL OR length(p_reason) = 0 THEN
        RAISE EXCEPTION 'a reason is required' USING ERRCODE = 'WL003';
    END IF;
    IF NOT EXISTS (SELECT 1 FROM wallet.holds h WHERE h.id = p_hold_id) THEN
        RAISE EXCEPTION 'no hold %', p_hold_id USING ERRCODE = 'WL002';
    END IF;
    v_request.kind := 'release';
    v_request.client := 'admin';
    v_request.key := 'release-hold:' || p_hold_id || ':' || gen_random_uuid();
    v_request.request_hash := '\x00'::BYTEA;
    v_request.any_client := TRUE;
    v_request.hold_id := p_hold_id;
    v_request.reason := p_reason;
    SELECT * INTO v_result FROM wallet.hold_many(ARRAY[v_request]);
    SELECT * INTO v_hold FROM wallet.holds h WHERE h.id = p_hold_id;
    INSERT INTO wallet.admin_audit (action, operator, reason, arguments, outcome)
    VALUES ('release_hold', p_operator, p_reason, jsonb_build_object('hold_id', p_hold_id), v_result.outcome);
    outcome := v_result.outcome;
    user_id := v_hold.user_id;
    currency := v_hold.currency;
    amount := v_hold.amount;
    status := v_hold.status;
    RETURN NEXT;
END;
$$;

-- The holds still held and in time, oldest first (Scripts/admin/holds.sql).
CREATE OR REPLACE FUNCTION wallet.active_holds(p_user_id TEXT DEFAULT NULL)
RETURNS TABLE (hold_id BIGINT, client TEXT, user_id TEXT, currency TEXT, amount BIGINT, reason TEXT,
               created_at TEXT, expires_at TEXT)
LANGUAGE sql STABLE AS $$
    SELECT h.id, h.client::TEXT, h.user_id::TEXT, h.currency::TEXT, h.amount, h.reason,
           wallet.rfc3339(h.created_at), wallet.rfc3339(h.expires_at)
    FROM wallet.holds h
    WHERE h.status = 'held' AND h.expires_at > now() AND (p_user_id IS NULL OR h.user_id = p_user_id)
    ORDER BY h.created_at, h.id;
$$;
