-- Holds, re-applied by the migrator whenever this file changes (the table
-- is in 0009_holds.sql; typed answers and one request composite per
-- operation since 0017_one_posting.sql).
--
-- Lock order, as everywhere (01_lock_flow_nos.sql): the wallet row, then
-- the hold row. A hold's wallet and amount never change, so they are read
-- before the wallet is locked. A capture posts its debit through
-- wallet.post_entries under that wallet lock.
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
-- The first five are stored under the key and replayed; the last three are
-- not stored.

-- The wallet's `held` after expiring its holds past expires_at; call with
-- the wallet row locked.
CREATE OR REPLACE FUNCTION wallet.expire_due_holds(p_user_id TEXT, p_currency TEXT)
RETURNS BIGINT
LANGUAGE plpgsql AS $$
DECLARE
    v_expired BIGINT;
    v_held    BIGINT;
BEGIN
    WITH expired AS (
        UPDATE wallet.holds h SET status = 'expired', expired_at = now()
        WHERE h.user_id = p_user_id AND h.currency = p_currency AND h.status = 'held' AND h.expires_at <= now()
        RETURNING h.amount
    )
    SELECT coalesce(sum(e.amount), 0) INTO v_expired FROM expired e;
    -- Most calls expire nothing: they read held rather than write the
    -- wallet row again for nothing (a new row version, and its WAL).
    IF v_expired = 0 THEN
        SELECT w.held INTO v_held FROM wallet.wallets w WHERE w.user_id = p_user_id AND w.currency = p_currency;
    ELSE
        UPDATE wallet.wallets w SET held = w.held - v_expired
        WHERE w.user_id = p_user_id AND w.currency = p_currency
        RETURNING w.held INTO v_held;
    END IF;
    RETURN coalesce(v_held, 0);
END;
$$;

-- The sweeper: expires the due holds of up to `p_wallets` wallets, locking
-- each wallet in key order (then its holds); returns how many holds it
-- expired.
CREATE OR REPLACE FUNCTION wallet.expire_holds(p_wallets INTEGER)
RETURNS INTEGER
LANGUAGE plpgsql AS $$
DECLARE
    w       RECORD;
    v_count INTEGER := 0;
    v_due   INTEGER;
BEGIN
    FOR w IN SELECT DISTINCT h.user_id, h.currency FROM wallet.holds h
             WHERE h.status = 'held' AND h.expires_at <= now()
             ORDER BY 1, 2 LIMIT p_wallets LOOP
        PERFORM 1 FROM wallet.wallets x WHERE x.user_id = w.user_id AND x.currency = w.currency FOR UPDATE;
        SELECT count(*) INTO v_due FROM wallet.holds h
        WHERE h.user_id = w.user_id AND h.currency = w.currency AND h.status = 'held' AND h.expires_at <= now();
        PERFORM wallet.expire_due_holds(w.user_id, w.currency);
        v_count := v_count + v_due;
    END LOOP;
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

-- Keeps an answer under its request's key (`p_amount`: the amount the
-- operation was about) and returns it. The key's primary key decides a race
-- with another transaction (see the top of this file).
CREATE OR REPLACE FUNCTION wallet.store_hold_answer(p_request wallet.hold_request, p_result wallet.hold_result,
                                                    p_amount BIGINT)
RETURNS wallet.hold_result
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO wallet.idempotency_keys (client, key, request_hash, outcome, request_id, entry_id, amount,
                                         balance, hold_id, held)
    VALUES (p_request.client, p_request.key, p_request.request_hash, p_result.outcome, p_request.request_id,
            CASE WHEN p_result.outcome = 'captured' THEN (p_result.hold).entry_id END, p_amount,
            p_result.balance, (p_result.hold).id, p_result.held);
    RETURN p_result;
END;
$$;

-- The wallet `p_user_id`, `p_currency` locked, its due holds expired: its
-- balance and held (both 0 for a wallet that does not exist).
CREATE OR REPLACE FUNCTION wallet.lock_hold_wallet(p_user_id TEXT, p_currency TEXT)
RETURNS wallet.batch_wallet
LANGUAGE plpgsql AS $$
DECLARE
    v_wallet  wallet.batch_wallet := ROW(p_user_id, p_currency, 0, FALSE, 0)::wallet.batch_wallet;
    v_balance BIGINT;
    v_held    BIGINT;
BEGIN
    SELECT w.balance, w.held INTO v_balance, v_held FROM wallet.wallets w
    WHERE w.user_id = p_user_id AND w.currency = p_currency FOR UPDATE;
    IF FOUND THEN
        v_wallet.balance := v_balance;
        -- A wallet that holds nothing has no hold to expire (as for debits).
        v_wallet.held := CASE WHEN v_held > 0 THEN wallet.expire_due_holds(p_user_id, p_currency) ELSE 0 END;
    END IF;
    RETURN v_wallet;
END;
$$;

-- Reserves the request's amount of the wallet's available balance for
-- its expires_in_seconds.
CREATE OR REPLACE FUNCTION wallet.place_hold(p_request wallet.hold_request)
RETURNS wallet.hold_result
LANGUAGE plpgsql AS $$
DECLARE
    r        wallet.hold_request := p_request;
    v_wallet wallet.batch_wallet;
    v_hold   wallet.holds;
BEGIN
    IF r.amount IS NULL OR r.amount NOT BETWEEN 1 AND 1000000000000
       OR r.expires_in_seconds IS NULL OR r.expires_in_seconds NOT BETWEEN 1 AND 86400 THEN
        RAISE EXCEPTION 'place_hold: amount or expiry out of range' USING ERRCODE = 'WL003';
    END IF;
    IF NOT EXISTS (SELECT 1 FROM wallet.products p WHERE p.currency = r.currency) THEN
        RETURN wallet.hold_answer('unknown_currency', NULL);
    END IF;
    v_wallet := wallet.lock_hold_wallet(r.user_id, r.currency);
    IF v_wallet.balance - v_wallet.held < r.amount THEN
        RETURN wallet.store_hold_answer(r, wallet.hold_answer(
            p_outcome => 'insufficient_funds', p_request_id => r.request_id, p_balance => v_wallet.balance,
            p_held => v_wallet.held), r.amount);
    END IF;
    INSERT INTO wallet.holds (client, user_id, currency, amount, reason, metadata, expires_at)
    VALUES (r.client, r.user_id, r.currency, r.amount, r.reason, r.metadata,
            now() + make_interval(secs => r.expires_in_seconds))
    RETURNING * INTO v_hold;
    UPDATE wallet.wallets w SET held = w.held + r.amount, updated_at = now()
    WHERE w.user_id = r.user_id AND w.currency = r.currency
    RETURNING w.held INTO v_wallet.held;
    RETURN wallet.store_hold_answer(r, wallet.hold_answer(
        p_outcome => 'held', p_request_id => r.request_id, p_hold => v_hold, p_balance => v_wallet.balance,
        p_held => v_wallet.held), r.amount);
END;
$$;

-- The hold `p_hold_id` as it is once its wallet is locked and its wallet's
-- due holds are expired, itself locked; a NULL row when there is no such
-- hold for `p_client` (`p_any_client`: an admin key sees every hold).
CREATE OR REPLACE FUNCTION wallet.lock_hold(p_hold_id BIGINT, p_client TEXT, p_any_client BOOLEAN)
RETURNS wallet.holds
LANGUAGE plpgsql AS $$
DECLARE
    v_hold wallet.holds;
BEGIN
    -- Its wallet never changes, so it is read before the wallet's lock.
    SELECT * INTO v_hold FROM wallet.holds h WHERE h.id = p_hold_id AND (p_any_client OR h.client = p_client);
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    PERFORM 1 FROM wallet.wallets w WHERE w.user_id = v_hold.user_id AND w.currency = v_hold.currency FOR UPDATE;
    PERFORM wallet.expire_due_holds(v_hold.user_id, v_hold.currency);
    SELECT * INTO v_hold FROM wallet.holds h WHERE h.id = p_hold_id FOR UPDATE;
    RETURN v_hold;
END;
$$;

-- What a capture and a release share: the request's hold, locked (wallet
-- first, its due holds expired), with its wallet's balance and held. The
-- answer has no outcome when the hold can be settled; otherwise it is
-- not_found (no such hold for this client) or hold_not_active, stored under
-- the key.
CREATE OR REPLACE FUNCTION wallet.hold_to_settle(p_request wallet.hold_request)
RETURNS wallet.hold_result
LANGUAGE plpgsql AS $$
DECLARE
    v_hold   wallet.holds;
    v_result wallet.hold_result;
BEGIN
    v_hold := wallet.lock_hold(p_request.hold_id, p_request.client, p_request.any_client);
    IF v_hold.id IS NULL THEN
        RETURN wallet.hold_answer('not_found', NULL);
    END IF;
    v_result := wallet.hold_answer(NULL, p_request.request_id, v_hold);
    SELECT w.balance, w.held INTO v_result.balance, v_result.held FROM wallet.wallets w
    WHERE w.user_id = v_hold.user_id AND w.currency = v_hold.currency;
    IF v_hold.status <> 'held' THEN
        v_result.outcome := 'hold_not_active';
        RETURN wallet.store_hold_answer(p_request, v_result, coalesce(p_request.amount, v_hold.amount));
    END IF;
    RETURN v_result;
END;
$$;

-- The wallet's held, less a hold that is settled now; call with the wallet
-- row locked.
CREATE OR REPLACE FUNCTION wallet.unhold(p_hold wallet.holds)
RETURNS BIGINT
LANGUAGE plpgsql AS $$
DECLARE
    v_held BIGINT;
BEGIN
    UPDATE wallet.wallets w SET held = w.held - p_hold.amount, updated_at = now()
    WHERE w.user_id = p_hold.user_id AND w.currency = p_hold.currency
    RETURNING w.held INTO v_held;
    RETURN v_held;
END;
$$;

-- Debits up to the held amount (all of it when the request names none)
-- and releases the rest. A capture is a debit: it never takes the balance
-- below zero (insufficient_funds, and the hold stays held).
CREATE OR REPLACE FUNCTION wallet.capture_hold(p_request wallet.hold_request)
RETURNS wallet.hold_result
LANGUAGE plpgsql AS $$
DECLARE
    v_result wallet.hold_result;
    v_hold   wallet.holds;
    v_amount BIGINT;
    v_entry  wallet.entries;
BEGIN
    v_result := wallet.hold_to_settle(p_request);
    IF v_result.outcome IS NOT NULL THEN
        RETURN v_result;
    END IF;
    v_hold := v_result.hold;
    v_amount := coalesce(p_request.amount, v_hold.amount);
    IF v_amount > v_hold.amount OR v_result.balance < v_amount THEN
        v_result.outcome := CASE WHEN v_amount > v_hold.amount THEN 'amount_exceeds_hold' ELSE 'insufficient_funds' END;
        RETURN wallet.store_hold_answer(p_request, v_result, v_amount);
    END IF;
    v_entry := (wallet.post_entries(ARRAY[wallet.new_posting(
        p_kind => 'debit', p_user_id => v_hold.user_id, p_currency => v_hold.currency, p_amount => -v_amount,
        p_reference => 'hold:' || v_hold.id, p_client => p_request.client,
        p_metadata => jsonb_strip_nulls(jsonb_build_object('reason', v_hold.reason, 'metadata', v_hold.metadata,
                                                           'hold_id', v_hold.id)))]))[1];
    UPDATE wallet.holds h SET status = 'captured', captured_amount = v_amount, captured_at = now(), entry_id = v_entry.id
    WHERE h.id = v_hold.id
    RETURNING * INTO v_hold;
    v_result.hold := v_hold;
    v_result.outcome := 'captured';
    v_result.balance := v_entry.balance_after;
    v_result.held := wallet.unhold(v_hold);
    RETURN wallet.store_hold_answer(p_request, v_result, v_amount);
END;
$$;

-- Gives a held hold's coins back to the available balance; no entry. The
-- request's reason, if any (an operator's), is kept on the hold.
CREATE OR REPLACE FUNCTION wallet.release_hold(p_request wallet.hold_request)
RETURNS wallet.hold_result
LANGUAGE plpgsql AS $$
DECLARE
    v_result wallet.hold_result;
    v_hold   wallet.holds;
BEGIN
    v_result := wallet.hold_to_settle(p_request);
    IF v_result.outcome IS NOT NULL THEN
        RETURN v_result;
    END IF;
    UPDATE wallet.holds h SET status = 'released', released_at = now(), release_reason = p_request.reason
    WHERE h.id = (v_result.hold).id
    RETURNING * INTO v_hold;
    v_result.hold := v_hold;
    v_result.outcome := 'released';
    v_result.held := wallet.unhold(v_hold);
    RETURN wallet.store_hold_answer(p_request, v_result, v_hold.amount);
END;
$$;

-- A writer's batch of hold operations, in the given order (the writer
-- sorts them by wallet), one answer each, in order. A key that has an
-- answer (stored by an earlier transaction, a debit of this batch's, or an
-- earlier operation of this call) answers with it.
CREATE OR REPLACE FUNCTION wallet.hold_many(p_requests wallet.hold_request[])
RETURNS SETOF wallet.hold_result
LANGUAGE plpgsql AS $$
DECLARE
    r        wallet.hold_request;
    v_stored wallet.idempotency_keys;
BEGIN
    FOREACH r IN ARRAY coalesce(p_requests, '{}') LOOP
        SELECT * INTO v_stored FROM wallet.idempotency_keys k WHERE k.client = r.client AND k.key = r.key;
        IF FOUND THEN
            RETURN NEXT wallet.hold_replay(v_stored, r.request_hash);
        ELSIF r.kind = 'place' THEN
            RETURN NEXT wallet.place_hold(r);
        ELSIF r.kind = 'capture' THEN
            RETURN NEXT wallet.capture_hold(r);
        ELSIF r.kind = 'release' THEN
            RETURN NEXT wallet.release_hold(r);
        ELSE
            RAISE EXCEPTION 'hold_many: unknown kind %', r.kind USING ERRCODE = 'WL003';
        END IF;
    END LOOP;
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
    v_result := wallet.release_hold(v_request);
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
