-- Credits and debits, as set-based functions: each takes arrays (one element
-- per operation) and returns one row per operation, in order. The service
-- calls them with a whole batch inside one transaction, or with a single
-- element; the outcome of an operation is the same either way, including
-- duplicates inside one batch.
--
-- Lock order, everywhere: wallet rows in (user_id, currency) order first,
-- then credit rows.

-- flowNOs that Apple refunded before they were ever credited. A later
-- credit attempt for one of them is refused.
CREATE TABLE wallet.revoked_flow_nos (
    flow_no           TEXT PRIMARY KEY,
    notification_uuid TEXT,
    recorded_at       TIMESTAMPTZ NOT NULL DEFAULT now()
);

CREATE FUNCTION wallet.balance_json(p_user_id TEXT, p_currency TEXT, p_balance BIGINT) RETURNS JSONB
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN jsonb_build_object('user_id', p_user_id, 'currency', p_currency, 'balance', p_balance);

CREATE FUNCTION wallet.credit_json(c wallet.credits) RETURNS JSONB
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN jsonb_build_object(
    'flow_no', c.flow_no, 'user_id', c.user_id, 'product_id', c.product_id,
    'quantity', c.quantity, 'currency', c.currency, 'amount', c.amount,
    'status', c.status, 'entry_id', c.entry_id, 'created_at', wallet.rfc3339(c.created_at));

-- The answer for a flowNO that is already credited: a replay when the
-- request matches it, a conflict otherwise.
CREATE FUNCTION wallet.credit_existing(c wallet.credits, p_user_id TEXT, p_product_id TEXT, p_quantity INTEGER,
                                       OUT outcome TEXT, OUT body JSONB)
LANGUAGE plpgsql STABLE AS $$
BEGIN
    IF c.user_id = p_user_id AND c.product_id = p_product_id AND c.quantity = p_quantity THEN
        outcome := 'replayed';
        body := jsonb_build_object(
            'credit', wallet.credit_json(c),
            'balance', wallet.balance_json(c.user_id, c.currency,
                (SELECT w.balance FROM wallet.wallets w WHERE w.user_id = c.user_id AND w.currency = c.currency)));
    ELSE
        outcome := 'flow_no_conflict';
        body := jsonb_build_object('code', 'flow_no_conflict');
    END IF;
END;
$$;

-- Credits a product bundle per flowNO, exactly once.
--
-- Outcomes: credited, replayed, flow_no_conflict, unknown_product,
-- amount_mismatch (the caller claimed an amount other than catalog ×
-- quantity), revoked (Apple refunded this flowNO before it was credited).
-- The flowNO is looked up before the catalog, so a retry still replays after
-- its product was repriced or deactivated.
CREATE FUNCTION wallet.credit_many(
    p_clients TEXT[], p_flow_nos TEXT[], p_user_ids TEXT[], p_product_ids TEXT[],
    p_quantities INTEGER[], p_claimed_amounts BIGINT[], p_sources TEXT[], p_environments TEXT[])
RETURNS TABLE (ord INTEGER, outcome TEXT, body JSONB)
LANGUAGE plpgsql AS $$
DECLARE
    v_count   INTEGER := coalesce(array_length(p_flow_nos, 1), 0);
    v_credit  wallet.credits;
    v_product wallet.products;
    v_amount  BIGINT;
    v_balance BIGINT;
    v_entry   BIGINT;
BEGIN
    IF array_length(p_clients, 1) IS DISTINCT FROM array_length(p_flow_nos, 1)
       OR array_length(p_user_ids, 1) IS DISTINCT FROM array_length(p_flow_nos, 1)
       OR array_length(p_product_ids, 1) IS DISTINCT FROM array_length(p_flow_nos, 1)
       OR array_length(p_quantities, 1) IS DISTINCT FROM array_length(p_flow_nos, 1)
       OR array_length(p_claimed_amounts, 1) IS DISTINCT FROM array_length(p_flow_nos, 1)
       OR array_length(p_sources, 1) IS DISTINCT FROM array_length(p_flow_nos, 1)
       OR array_length(p_environments, 1) IS DISTINCT FROM array_length(p_flow_nos, 1) THEN
        RAISE EXCEPTION 'credit_many: argument arrays differ in length' USING ERRCODE = 'WL003';
    END IF;

    -- Lock the batch's existing wallets up front, in key order.
    PERFORM 1 FROM wallet.wallets w
    WHERE (w.user_id, w.currency) IN (
        SELECT x.user_id, p.currency
        FROM unnest(p_user_ids, p_product_ids) AS x(user_id, product_id)
        JOIN wallet.products p ON p.product_id = x.product_id)
    ORDER BY w.user_id, w.currency
    FOR UPDATE;

    FOR i IN 1 .. v_count LOOP
        ord := i;
        SELECT * INTO v_credit FROM wallet.credits c WHERE c.flow_no = p_flow_nos[i];
        IF FOUND THEN
            SELECT e.outcome, e.body INTO outcome, body
            FROM wallet.credit_existing(v_credit, p_user_ids[i], p_product_ids[i], p_quantities[i]) e;
            RETURN NEXT;
            CONTINUE;
        END IF;

        IF EXISTS (SELECT 1 FROM wallet.revoked_flow_nos r WHERE r.flow_no = p_flow_nos[i]) THEN
            outcome := 'revoked';
            body := jsonb_build_object('code', 'revoked');
            RETURN NEXT;
            CONTINUE;
        END IF;

        SELECT * INTO v_product FROM wallet.products p WHERE p.product_id = p_product_ids[i] AND p.active;
        IF NOT FOUND THEN
            outcome := 'unknown_product';
            body := jsonb_build_object('code', 'unknown_product');
            RETURN NEXT;
            CONTINUE;
        END IF;
        v_amount := v_product.amount * p_quantities[i];
        IF p_claimed_amounts[i] IS NOT NULL AND p_claimed_amounts[i] <> v_amount THEN
            outcome := 'amount_mismatch';
            body := jsonb_build_object('code', 'amount_mismatch', 'expected_amount', v_amount);
            RETURN NEXT;
            CONTINUE;
        END IF;

        -- Create the wallet without races, then hold its lock; the entry id
        -- is drawn under that lock so ids follow the wallet's order.
        INSERT INTO wallet.wallets (user_id, currency) VALUES (p_user_ids[i], v_product.currency)
        ON CONFLICT DO NOTHING;
        SELECT w.balance INTO v_balance FROM wallet.wallets w
        WHERE w.user_id = p_user_ids[i] AND w.currency = v_product.currency
        FOR UPDATE;
        v_entry := nextval('wallet.entries_id_seq');

        -- The unique flowNO decides a race with another transaction: this
        -- insert waits for it, and then does nothing if it committed.
        INSERT INTO wallet.credits AS c (flow_no, user_id, product_id, quantity, currency, amount,
                                         source, environment, client, entry_id)
        VALUES (p_flow_nos[i], p_user_ids[i], v_product.product_id, p_quantities[i], v_product.currency,
                v_amount, p_sources[i], p_environments[i], p_clients[i], v_entry)
        ON CONFLICT (flow_no) DO NOTHING
        RETURNING c.* INTO v_credit;
        IF NOT FOUND THEN
            SELECT * INTO v_credit FROM wallet.credits c WHERE c.flow_no = p_flow_nos[i];
            SELECT e.outcome, e.body INTO outcome, body
            FROM wallet.credit_existing(v_credit, p_user_ids[i], p_product_ids[i], p_quantities[i]) e;
            RETURN NEXT;
            CONTINUE;
        END IF;

        v_balance := v_balance + v_amount;
        UPDATE wallet.wallets w SET balance = v_balance, updated_at = now()
        WHERE w.user_id = p_user_ids[i] AND w.currency = v_product.currency;
        INSERT INTO wallet.entries (id, user_id, currency, amount, balance_after, kind, reference, client)
        VALUES (v_entry, p_user_ids[i], v_product.currency, v_amount, v_balance, 'credit', p_flow_nos[i], p_clients[i]);

        outcome := 'credited';
        body := jsonb_build_object('credit', wallet.credit_json(v_credit),
                                   'balance', wallet.balance_json(p_user_ids[i], v_product.currency, v_balance));
        RETURN NEXT;
    END LOOP;
END;
$$;

-- The answer for an idempotency key that already has an outcome.
CREATE FUNCTION wallet.debit_existing(k wallet.idempotency_keys, p_hash BYTEA,
                                      OUT outcome TEXT, OUT replayed BOOLEAN, OUT body JSONB, OUT request_id TEXT)
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    IF k.request_hash = p_hash THEN
        outcome := k.outcome;
        replayed := TRUE;
        body := k.response;
        request_id := k.request_id;
    ELSE
        outcome := 'idempotency_key_reused';
        replayed := FALSE;
        body := jsonb_build_object('code', 'idempotency_key_reused');
    END IF;
END;
$$;

-- Spends from a wallet under an idempotency key, never below zero.
--
-- Outcomes: debited, insufficient_funds (both stored under the key and
-- replayed for a retry with the same request), idempotency_key_reused (the
-- key was used for another request), unknown_currency. `replayed` is true
-- for an answer that comes from an earlier request.
CREATE FUNCTION wallet.debit_many(
    p_clients TEXT[], p_keys TEXT[], p_request_hashes BYTEA[], p_user_ids TEXT[], p_currencies TEXT[],
    p_amounts BIGINT[], p_reasons TEXT[], p_metadata JSONB[], p_request_ids TEXT[])
RETURNS TABLE (ord INTEGER, outcome TEXT, replayed BOOLEAN, body JSONB, request_id TEXT)
LANGUAGE plpgsql AS $$
DECLARE
    v_count    INTEGER := coalesce(array_length(p_keys, 1), 0);
    v_key      wallet.idempotency_keys;
    v_balance  BIGINT;
    v_entry    BIGINT;
    v_metadata JSONB;
BEGIN
    IF array_length(p_clients, 1) IS DISTINCT FROM array_length(p_keys, 1)
       OR array_length(p_request_hashes, 1) IS DISTINCT FROM array_length(p_keys, 1)
       OR array_length(p_user_ids, 1) IS DISTINCT FROM array_length(p_keys, 1)
       OR array_length(p_currencies, 1) IS DISTINCT FROM array_length(p_keys, 1)
       OR array_length(p_amounts, 1) IS DISTINCT FROM array_length(p_keys, 1)
       OR array_length(p_reasons, 1) IS DISTINCT FROM array_length(p_keys, 1)
       OR array_length(p_metadata, 1) IS DISTINCT FROM array_length(p_keys, 1)
       OR array_length(p_request_ids, 1) IS DISTINCT FROM array_length(p_keys, 1) THEN
        RAISE EXCEPTION 'debit_many: argument arrays differ in length' USING ERRCODE = 'WL003';
    END IF;

    PERFORM 1 FROM wallet.wallets w
    WHERE (w.user_id, w.currency) IN (SELECT * FROM unnest(p_user_ids, p_currencies))
    ORDER BY w.user_id, w.currency
    FOR UPDATE;

    FOR i IN 1 .. v_count LOOP
        ord := i;
        IF p_amounts[i] IS NULL OR p_amounts[i] NOT BETWEEN 1 AND 1000000000000 THEN
            RAISE EXCEPTION 'debit_many: amount out of range' USING ERRCODE = 'WL003';
        END IF;
        IF NOT EXISTS (SELECT 1 FROM wallet.products p WHERE p.currency = p_currencies[i]) THEN
            outcome := 'unknown_currency';
            replayed := FALSE;
            body := jsonb_build_object('code', 'unknown_currency');
            request_id := NULL;
            RETURN NEXT;
            CONTINUE;
        END IF;

        SELECT * INTO v_key FROM wallet.idempotency_keys k WHERE k.client = p_clients[i] AND k.key = p_keys[i];
        IF FOUND THEN
            SELECT e.outcome, e.replayed, e.body, e.request_id INTO outcome, replayed, body, request_id
            FROM wallet.debit_existing(v_key, p_request_hashes[i]) e;
            RETURN NEXT;
            CONTINUE;
        END IF;

        SELECT w.balance INTO v_balance FROM wallet.wallets w
        WHERE w.user_id = p_user_ids[i] AND w.currency = p_currencies[i]
        FOR UPDATE;
        v_balance := coalesce(v_balance, 0);
        replayed := FALSE;
        request_id := p_request_ids[i];
        IF v_balance >= p_amounts[i] THEN
            v_entry := nextval('wallet.entries_id_seq');
            v_balance := v_balance - p_amounts[i];
            outcome := 'debited';
            body := jsonb_build_object(
                'debit', jsonb_build_object(
                    'id', v_entry, 'user_id', p_user_ids[i], 'currency', p_currencies[i],
                    'amount', p_amounts[i], 'reason', p_reasons[i], 'entry_id', v_entry,
                    'created_at', wallet.rfc3339(now())),
                'balance', wallet.balance_json(p_user_ids[i], p_currencies[i], v_balance));
        ELSE
            v_entry := NULL;
            outcome := 'insufficient_funds';
            body := jsonb_build_object('code', 'insufficient_funds', 'balance', v_balance);
        END IF;

        -- The key's primary key decides a race with a concurrent request:
        -- this insert waits for it and then finds its outcome.
        INSERT INTO wallet.idempotency_keys (client, key, request_hash, outcome, response, request_id, entry_id)
        VALUES (p_clients[i], p_keys[i], p_request_hashes[i], outcome, body, p_request_ids[i], v_entry)
        ON CONFLICT DO NOTHING;
        IF NOT FOUND THEN
            SELECT * INTO v_key FROM wallet.idempotency_keys k WHERE k.client = p_clients[i] AND k.key = p_keys[i];
            SELECT e.outcome, e.replayed, e.body, e.request_id INTO outcome, replayed, body, request_id
            FROM wallet.debit_existing(v_key, p_request_hashes[i]) e;
            RETURN NEXT;
            CONTINUE;
        END IF;

        IF v_entry IS NOT NULL THEN
            UPDATE wallet.wallets w SET balance = v_balance, updated_at = now()
            WHERE w.user_id = p_user_ids[i] AND w.currency = p_currencies[i];
            v_metadata := NULL;
            IF p_reasons[i] IS NOT NULL OR p_metadata[i] IS NOT NULL THEN
                v_metadata := '{}'::JSONB;
                IF p_reasons[i] IS NOT NULL THEN v_metadata := v_metadata || jsonb_build_object('reason', p_reasons[i]); END IF;
                IF p_metadata[i] IS NOT NULL THEN v_metadata := v_metadata || jsonb_build_object('metadata', p_metadata[i]); END IF;
            END IF;
            INSERT INTO wallet.entries (id, user_id, currency, amount, balance_after, kind, reference, client, metadata)
            VALUES (v_entry, p_user_ids[i], p_currencies[i], -p_amounts[i], v_balance, 'debit', p_keys[i], p_clients[i],
                    v_metadata);
        END IF;
        RETURN NEXT;
    END LOOP;
END;
$$;

-- Deletes idempotency records older than `p_before`, at most `p_limit` of
-- them, and says how many went. The service calls it in small rounds.
CREATE FUNCTION wallet.purge_idempotency_keys(p_before TIMESTAMPTZ, p_limit INTEGER) RETURNS INTEGER
LANGUAGE sql AS $$
    WITH doomed AS (
        SELECT k.client, k.key FROM wallet.idempotency_keys k
        WHERE k.created_at < p_before
        ORDER BY k.created_at
        LIMIT p_limit
        FOR UPDATE SKIP LOCKED
    ), deleted AS (
        DELETE FROM wallet.idempotency_keys k USING doomed d
        WHERE k.client = d.client AND k.key = d.key
        RETURNING 1
    )
    SELECT count(*)::INTEGER FROM deleted;
$$;
