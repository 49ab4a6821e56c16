-- Holds, re-applied by the migrator whenever this file changes (the table
-- is in 0009_holds.sql).
--
-- Lock order, as everywhere: the idempotency key (an advisory lock, so two
-- requests with one key run one after the other), then the wallet row, then
-- the hold row. A hold's wallet and amount never change, so they are read
-- before the wallet is locked.
--
-- Outcomes of place_hold, capture_hold and release_hold:
--   held, captured, released           done
--   insufficient_funds                 the available balance (or, for a
--                                      capture, the balance) is too low
--   hold_not_active                    the hold is captured, released or
--                                      expired
--   amount_exceeds_hold                a capture of more than the hold
--   not_found                          no such hold for this client
--   idempotency_key_reused             the key was used for another request
--   unknown_currency                   no product uses the currency
-- The first five are stored under the key with their answer and replayed;
-- the last three are not stored.

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
    UPDATE wallet.wallets w SET held = w.held - v_expired
    WHERE w.user_id = p_user_id AND w.currency = p_currency
    RETURNING w.held INTO v_held;
    RETURN coalesce(v_held, 0);
END;
$$;

-- The sweeper: expires the due holds of up to `p_wallets` wallets, locking
-- each wallet in key order; returns how many holds it expired.
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

-- A hold as the API shows it.
CREATE OR REPLACE FUNCTION wallet.hold_json(h wallet.holds)
RETURNS JSONB
LANGUAGE sql STABLE AS $$
    SELECT jsonb_build_object(
        'id', h.id, 'user_id', h.user_id, 'currency', h.currency, 'amount', h.amount,
        -- A hold past its time is expired whether or not the sweeper came by.
        'status', CASE WHEN h.status = 'held' AND h.expires_at <= now() THEN 'expired' ELSE h.status END,
        'reason', h.reason, 'metadata', h.metadata,
        'expires_at', wallet.rfc3339(h.expires_at), 'created_at', wallet.rfc3339(h.created_at),
        'captured_amount', h.captured_amount, 'captured_at', wallet.rfc3339(h.captured_at),
        'released_at', wallet.rfc3339(h.released_at),
        'expired_at', CASE WHEN h.status = 'held' AND h.expires_at <= now() THEN wallet.rfc3339(h.expires_at)
                           ELSE wallet.rfc3339(h.expired_at) END);
$$;

-- A balance object: the balance, what active holds keep, what is available.
CREATE OR REPLACE FUNCTION wallet.balance_json(p_user_id TEXT, p_currency TEXT, p_balance BIGINT, p_held BIGINT)
RETURNS JSONB
LANGUAGE sql IMMUTABLE AS $$
    SELECT jsonb_build_object('user_id', p_user_id, 'currency', p_currency, 'balance', p_balance,
                              'held', p_held, 'available', p_balance - p_held);
$$;

-- The stored outcome of (client, key), after taking the key's lock: a
-- replay when the request is the same, `idempotency_key_reused` when not,
-- nothing when the key is new.
CREATE OR REPLACE FUNCTION wallet.hold_key_outcome(p_client TEXT, p_key TEXT, p_request_hash BYTEA)
RETURNS wallet.hold_result
LANGUAGE plpgsql AS $$
DECLARE
    v_stored wallet.idempotency_keys;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtextextended('wallet.key/' || p_client || '/' || p_key, 0));
    SELECT * INTO v_stored FROM wallet.idempotency_keys k WHERE k.client = p_client AND k.key = p_key;
    IF NOT FOUND THEN
        RETURN NULL;
    ELSIF v_stored.request_hash = p_request_hash THEN
        RETURN ROW(v_stored.outcome, TRUE, v_stored.response, v_stored.request_id)::wallet.hold_result;
    END IF;
    RETURN ROW('idempotency_key_reused', FALSE, NULL, NULL)::wallet.hold_result;
END;
$$;

-- Keeps an outcome under its key and returns it as answered now.
CREATE OR REPLACE FUNCTION wallet.store_hold_outcome(
    p_client TEXT, p_key TEXT, p_request_hash BYTEA, p_request_id TEXT, p_outcome TEXT, p_response JSONB,
    p_hold_id BIGINT, p_entry_id BIGINT, p_amount BIGINT, p_balance BIGINT, p_held BIGINT)
RETURNS wallet.hold_result
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO wallet.idempotency_keys (client, key, request_hash, outcome, response, request_id, entry_id, amount,
                                         balance, hold_id, held)
    VALUES (p_client, p_key, p_request_hash, p_outcome, p_response, p_request_id, p_entry_id, p_amount,
            p_balance, p_hold_id, p_held);
    RETURN ROW(p_outcome, FALSE, p_response, p_request_id)::wallet.hold_result;
END;
$$;

-- Reserves `p_amount` of the wallet's available balance for
-- `p_expires_in_seconds`.
CREATE OR REPLACE FUNCTION wallet.place_hold(
    p_client TEXT, p_key TEXT, p_request_hash BYTEA, p_request_id TEXT, p_user_id TEXT, p_currency TEXT,
    p_amount BIGINT, p_reason TEXT, p_metadata JSONB, p_expires_in_seconds INTEGER)
RETURNS wallet.hold_result
LANGUAGE plpgsql AS $$
DECLARE
    v_result  wallet.hold_result;
    v_balance BIGINT := 0;
    v_held    BIGINT := 0;
    v_hold    wallet.holds;
BEGIN
    IF p_amount IS NULL OR p_amount NOT BETWEEN 1 AND 1000000000000
       OR p_expires_in_seconds IS NULL OR p_expires_in_seconds NOT BETWEEN 1 AND 86400 THEN
        RAISE EXCEPTION 'place_hold: amount or expiry out of range' USING ERRCODE = 'WL003';
    END IF;
    v_result := wallet.hold_key_outcome(p_client, p_key, p_request_hash);
    IF v_result.outcome IS NOT NULL THEN
        RETURN v_result;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM wallet.products p WHERE p.currency = p_currency) THEN
        RETURN ROW('unknown_currency', FALSE, NULL, NULL)::wallet.hold_result;
    END IF;
    SELECT w.balance INTO v_balance FROM wallet.wallets w
    WHERE w.user_id = p_user_id AND w.currency = p_currency FOR UPDATE;
    IF FOUND THEN
        v_held := wallet.expire_due_holds(p_user_id, p_currency);
    ELSE
        v_balance := 0;
    END IF;
    IF v_balance - v_held < p_amount THEN
        RETURN wallet.store_hold_outcome(
            p_client, p_key, p_request_hash, p_request_id, 'insufficient_funds',
            jsonb_build_object('balance', v_balance, 'held', v_held, 'available', v_balance - v_held),
            NULL, NULL, p_amount, v_balance, v_held);
    END IF;
    INSERT INTO wallet.holds (client, user_id, currency, amount, reason, metadata, expires_at)
    VALUES (p_client, p_user_id, p_currency, p_amount, p_reason, p_metadata,
            now() + make_interval(secs => p_expires_in_seconds))
    RETURNING * INTO v_hold;
    UPDATE wallet.wallets w SET held = w.held + p_amount, updated_at = now()
    WHERE w.user_id = p_user_id AND w.currency = p_currency
    RETURNING w.held INTO v_held;
    RETURN wallet.store_hold_outcome(
        p_client, p_key, p_request_hash, p_request_id, 'held',
        jsonb_build_object('hold', wallet.hold_json(v_hold),
                           'balance', wallet.balance_json(p_user_id, p_currency, v_balance, v_held)),
        v_hold.id, NULL, p_amount, v_balance, v_held);
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

-- Debits up to the held amount (all of it when `p_amount` is NULL) and
-- releases the rest. `p_any_client`: an admin key, which may act on any hold.
CREATE OR REPLACE FUNCTION wallet.capture_hold(
    p_client TEXT, p_key TEXT, p_request_hash BYTEA, p_request_id TEXT, p_hold_id BIGINT, p_amount BIGINT,
    p_any_client BOOLEAN)
RETURNS wallet.hold_result
LANGUAGE plpgsql AS $$
DECLARE
    v_result  wallet.hold_result;
    v_hold    wallet.holds;
    v_balance BIGINT;
    v_held    BIGINT;
    v_amount  BIGINT;
    v_entry   BIGINT;
BEGIN
    v_result := wallet.hold_key_outcome(p_client, p_key, p_request_hash);
    IF v_result.outcome IS NOT NULL THEN
        RETURN v_result;
    END IF;
    v_hold := wallet.lock_hold(p_hold_id, p_client, p_any_client);
    IF v_hold.id IS NULL THEN
        RETURN ROW('not_found', FALSE, NULL, NULL)::wallet.hold_result;
    END IF;
    SELECT w.balance, w.held INTO v_balance, v_held FROM wallet.wallets w
    WHERE w.user_id = v_hold.user_id AND w.currency = v_hold.currency;
    v_amount := coalesce(p_amount, v_hold.amount);
    IF v_hold.status <> 'held' THEN
        RETURN wallet.store_hold_outcome(
            p_client, p_key, p_request_hash, p_request_id, 'hold_not_active',
            jsonb_build_object('hold', wallet.hold_json(v_hold)), v_hold.id, NULL, v_amount, v_balance, v_held);
    ELSIF v_amount > v_hold.amount THEN
        RETURN wallet.store_hold_outcome(
            p_client, p_key, p_request_hash, p_request_id, 'amount_exceeds_hold',
            jsonb_build_object('hold', wallet.hold_json(v_hold)), v_hold.id, NULL, v_amount, v_balance, v_held);
    ELSIF v_balance < v_amount THEN
        -- A capture is a debit: it never takes the balance below zero. The
        -- hold stays held.
        RETURN wallet.store_hold_outcome(
            p_client, p_key, p_request_hash, p_request_id, 'insufficient_funds',
            jsonb_build_object('balance', v_balance, 'held', v_held, 'available', v_balance - v_held),
            v_hold.id, NULL, v_amount, v_balance, v_held);
    END IF;
    v_entry := nextval('wallet.entries_id_seq');
    v_balance := v_balance - v_amount;
    UPDATE wallet.wallets w SET balance = v_balance, held = w.held - v_hold.amount, updated_at = now()
    WHERE w.user_id = v_hold.user_id AND w.currency = v_hold.currency
    RETURNING w.held INTO v_held;
    INSERT INTO wallet.entries (id, user_id, currency, amount, balance_after, kind, reference, client, metadata)
    VALUES (v_entry, v_hold.user_id, v_hold.currency, -v_amount, v_balance, 'debit', 'hold:' || v_hold.id, p_client,
            jsonb_strip_nulls(jsonb_build_object('reason', v_hold.reason, 'metadata', v_hold.metadata,
                                                 'hold_id', v_hold.id)));
    UPDATE wallet.holds h SET status = 'captured', captured_amount = v_amount, captured_at = now(), entry_id = v_entry
    WHERE h.id = v_hold.id
    RETURNING * INTO v_hold;
    RETURN wallet.store_hold_outcome(
        p_client, p_key, p_request_hash, p_request_id, 'captured',
        jsonb_build_object(
            'hold', wallet.hold_json(v_hold),
            'debit', jsonb_build_object('id', v_entry, 'entry_id', v_entry, 'user_id', v_hold.user_id,
                                        'currency', v_hold.currency, 'amount', v_amount, 'reason', v_hold.reason,
                                        'created_at', wallet.rfc3339(now())),
            'balance', wallet.balance_json(v_hold.user_id, v_hold.currency, v_balance, v_held)),
        v_hold.id, v_entry, v_amount, v_balance, v_held);
END;
$$;

-- Gives a held hold's coins back to the available balance; no entry.
-- `p_reason` is kept on the hold.
CREATE OR REPLACE FUNCTION wallet.release_hold(
    p_client TEXT, p_key TEXT, p_request_hash BYTEA, p_request_id TEXT, p_hold_id BIGINT, p_any_client BOOLEAN,
    p_reason TEXT DEFAULT NULL)
RETURNS wallet.hold_result
LANGUAGE plpgsql AS $$
DECLARE
    v_result  wallet.hold_result;
    v_hold    wallet.holds;
    v_balance BIGINT;
    v_held    BIGINT;
BEGIN
    v_result := wallet.hold_key_outcome(p_client, p_key, p_request_hash);
    IF v_result.outcome IS NOT NULL THEN
        RETURN v_result;
    END IF;
    v_hold := wallet.lock_hold(p_hold_id, p_client, p_any_client);
    IF v_hold.id IS NULL THEN
        RETURN ROW('not_found', FALSE, NULL, NULL)::wallet.hold_result;
    END IF;
    SELECT w.balance, w.held INTO v_balance, v_held FROM wallet.wallets w
    WHERE w.user_id = v_hold.user_id AND w.currency = v_hold.currency;
    IF v_hold.status <> 'held' THEN
        RETURN wallet.store_hold_outcome(
            p_client, p_key, p_request_hash, p_request_id, 'hold_not_active',
            jsonb_build_object('hold', wallet.hold_json(v_hold)), v_hold.id, NULL, v_hold.amount, v_balance, v_held);
    END IF;
    UPDATE wallet.holds h SET status = 'released', released_at = now(), release_reason = p_reason
    WHERE h.id = v_hold.id
    RETURNING * INTO v_hold;
    UPDATE wallet.wallets w SET held = w.held - v_hold.amount, updated_at = now()
    WHERE w.user_id = v_hold.user_id AND w.currency = v_hold.currency
    RETURNING w.held INTO v_held;
    RETURN wallet.store_hold_outcome(
        p_client, p_key, p_request_hash, p_request_id, 'released',
        jsonb_build_object('hold', wallet.hold_json(v_hold),
                           'balance', wallet.balance_json(v_hold.user_id, v_hold.currency, v_balance, v_held)),
        v_hold.id, NULL, v_hold.amount, v_balance, v_held);
END;
$$;

-- An operator's release (Scripts/admin/holds.sql), audited. The key is the
-- audit's own, so a repeated run answers as the first did.
CREATE OR REPLACE FUNCTION wallet.admin_release_hold(p_hold_id BIGINT, p_reason TEXT, p_operator TEXT)
RETURNS TABLE (outcome TEXT, user_id TEXT, currency TEXT, amount BIGINT, status TEXT)
LANGUAGE plpgsql AS $$
DECLARE
    v_result wallet.hold_result;
    v_hold   wallet.holds;
BEGIN
    IF p_reason IS NULL OR length(p_reason) = 0 THEN
        RAISE EXCEPTION 'a reason is required' USING ERRCODE = 'WL003';
    END IF;
    SELECT * INTO v_hold FROM wallet.holds h WHERE h.id = p_hold_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no hold %', p_hold_id USING ERRCODE = 'WL002';
    END IF;
    v_result := wallet.release_hold('admin', 'release-hold:' || p_hold_id || ':' || gen_random_uuid(),
                                    '\x00'::BYTEA, NULL, p_hold_id, TRUE, p_reason);
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

-- A writer's batch of hold operations, in the given order (the writer
-- sorts them by wallet), one answer each, in order.
CREATE OR REPLACE FUNCTION wallet.hold_many(p_requests wallet.hold_request[])
RETURNS SETOF wallet.hold_result
LANGUAGE plpgsql AS $$
DECLARE
    r wallet.hold_request;
BEGIN
    FOREACH r IN ARRAY coalesce(p_requests, '{}') LOOP
        RETURN NEXT CASE r.kind
            WHEN 'place' THEN wallet.place_hold(r.client, r.key, r.request_hash, r.request_id, r.user_id, r.currency,
                                                r.amount, r.reason, r.metadata, r.expires_in_seconds)
            WHEN 'capture' THEN wallet.capture_hold(r.client, r.key, r.request_hash, r.request_id, r.hold_id, r.amount,
                                                    r.any_client)
            WHEN 'release' THEN wallet.release_hold(r.client, r.key, r.request_hash, r.request_id, r.hold_id,
                                                    r.any_client)
        END;
    END LOOP;
END;
$$;
