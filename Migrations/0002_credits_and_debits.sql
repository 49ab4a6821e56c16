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
    flow_no           TEXT COLLATE "C" PRIMARY KEY,
    notification_uuid TEXT,
    recorded_at       TIMESTAMPTZ NOT NULL DEFAULT now()
);

-- One argument array per field, one element per operation: they must match.
CREATE FUNCTION wallet.require_equal_lengths(p_function TEXT, VARIADIC p_lengths INTEGER[]) RETURNS VOID
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM unnest(p_lengths) l WHERE l IS DISTINCT FROM p_lengths[1]) THEN
        RAISE EXCEPTION '%: argument arrays differ in length', p_function USING ERRCODE = 'WL003';
    END IF;
END;
$$;

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

-- Locks the wallets named by (user, currency) pairs, in key order, and
-- numbers them: `users`, `currencies` and `balances` list the wallets that
-- exist, and `op_wallet` gives, for each pair in turn, its wallet's number
-- (NULL for a wallet that does not exist, or a NULL pair). Both batch
-- functions lock through here, so the lock order is written once.
CREATE FUNCTION wallet.lock_wallets(p_user_ids TEXT[], p_currencies TEXT[],
                                    OUT users TEXT[], OUT currencies TEXT[], OUT balances BIGINT[],
                                    OUT op_wallet INTEGER[])
LANGUAGE plpgsql
SET enable_seqscan = off
SET plan_cache_mode = force_generic_plan
AS $$
BEGIN
    WITH locked AS (
        SELECT w.user_id, w.currency, w.balance FROM wallet.wallets w
        WHERE (w.user_id, w.currency) IN (SELECT * FROM unnest(p_user_ids, p_currencies))
        ORDER BY w.user_id, w.currency
        FOR UPDATE
    ), numbered AS (
        SELECT l.*, row_number() OVER (ORDER BY l.user_id, l.currency)::INTEGER AS number FROM locked l
    )
    SELECT (SELECT coalesce(array_agg(n.user_id ORDER BY n.number), '{}') FROM numbered n),
           (SELECT coalesce(array_agg(n.currency ORDER BY n.number), '{}') FROM numbered n),
           (SELECT coalesce(array_agg(n.balance ORDER BY n.number), '{}') FROM numbered n),
           (SELECT array_agg(n.number ORDER BY u.ord)
            FROM unnest(p_user_ids, p_currencies) WITH ORDINALITY AS u(user_id, currency, ord)
            LEFT JOIN numbered n ON n.user_id = u.user_id AND n.currency = u.currency)
    INTO users, currencies, balances, op_wallet;
END;
$$;

-- Credits a product bundle per flowNO, exactly once.
--
-- Outcomes: credited, replayed, flow_no_conflict, unknown_product,
-- amount_mismatch (the caller claimed an amount other than catalog ×
-- quantity), revoked (Apple refunded this flowNO before it was credited).
-- The flowNO is looked up before the catalog, so a retry still replays after
-- its product was repriced or deactivated. A replay answers with the credit
-- and the balance as they are now.
CREATE FUNCTION wallet.credit_many(
    p_clients TEXT[], p_flow_nos TEXT[], p_user_ids TEXT[], p_product_ids TEXT[],
    p_quantities INTEGER[], p_claimed_amounts BIGINT[], p_sources TEXT[], p_environments TEXT[])
RETURNS TABLE (ord INTEGER, outcome TEXT, body JSONB)
LANGUAGE plpgsql
SET enable_seqscan = off
SET plan_cache_mode = force_generic_plan
AS $$
#variable_conflict use_column
DECLARE
    v_count      INTEGER := coalesce(array_length(p_flow_nos, 1), 0);
    v_created_at TEXT := wallet.rfc3339(now());
    -- Per operation, read in one query: the credit already committed for its
    -- flowNO, its product, whether Apple revoked the flowNO, and the first
    -- operation of the batch with the same flowNO.
    op_credit    wallet.credits[];
    op_product   wallet.products[];
    op_revoked   BOOLEAN[];
    op_first     INTEGER[];
    -- Per operation: the currency of the wallet it touches (if any), and
    -- that wallet's number among the locked ones.
    op_currency  TEXT[] := array_fill(NULL::TEXT, ARRAY[v_count]);
    op_creates   BOOLEAN[] := array_fill(FALSE, ARRAY[v_count]);
    op_wallet    INTEGER[];
    -- The locked wallets, numbered in key order.
    w_users      TEXT[];
    w_currencies TEXT[];
    w_balances   BIGINT[];
    w_changed    BOOLEAN[];
    -- Per operation, the results.
    o_outcome    TEXT[] := array_fill(NULL::TEXT, ARRAY[v_count]);
    o_body       JSONB[] := array_fill(NULL::JSONB, ARRAY[v_count]);
    o_amount     BIGINT[] := array_fill(NULL::BIGINT, ARRAY[v_count]);
    o_new        BOOLEAN[] := array_fill(FALSE, ARRAY[v_count]);
    o_entry      BIGINT[] := array_fill(NULL::BIGINT, ARRAY[v_count]);
    o_after      BIGINT[] := array_fill(NULL::BIGINT, ARRAY[v_count]);
    o_credit     JSONB[] := array_fill(NULL::JSONB, ARRAY[v_count]);
    -- By first operation of a flowNO: the operation that credited it here.
    g_credited   INTEGER[] := array_fill(NULL::INTEGER, ARRAY[v_count]);
    v_credit     wallet.credits;
    v_product    wallet.products;
    v_earlier    INTEGER;
    v_wallet     INTEGER;
    v_new_count  INTEGER := 0;
    v_written    INTEGER;
BEGIN
    PERFORM wallet.require_equal_lengths('credit_many', cardinality(p_clients), v_count, cardinality(p_user_ids),
        cardinality(p_product_ids), cardinality(p_quantities), cardinality(p_claimed_amounts),
        cardinality(p_sources), cardinality(p_environments));
    IF v_count = 0 THEN
        RETURN;
    END IF;

    SELECT array_agg(c ORDER BY u.ord), array_agg(p ORDER BY u.ord), array_agg(r.flow_no IS NOT NULL ORDER BY u.ord),
           array_agg(u.first ORDER BY u.ord)
    INTO op_credit, op_product, op_revoked, op_first
    FROM (SELECT x.flow_no, x.product_id, x.ord,
                 min(x.ord) OVER (PARTITION BY x.flow_no)::INTEGER AS first
          FROM unnest(p_flow_nos, p_product_ids) WITH ORDINALITY AS x(flow_no, product_id, ord)) u
    LEFT JOIN wallet.credits c ON c.flow_no = u.flow_no
    LEFT JOIN wallet.products p ON p.product_id = u.product_id AND p.active
    LEFT JOIN wallet.revoked_flow_nos r ON r.flow_no = u.flow_no;

    -- First pass: settle what does not depend on order, and name each
    -- operation's wallet.
    FOR i IN 1 .. v_count LOOP
        v_credit := op_credit[i];
        IF v_credit.flow_no IS NOT NULL THEN
            IF v_credit.user_id = p_user_ids[i] THEN
                op_currency[i] := v_credit.currency;
            END IF;
            CONTINUE;
        END IF;
        IF op_revoked[i] THEN
            o_outcome[i] := 'revoked';
            o_body[i] := jsonb_build_object('code', 'revoked');
            CONTINUE;
        END IF;
        v_product := op_product[i];
        IF v_product.product_id IS NULL THEN
            o_outcome[i] := 'unknown_product';
            o_body[i] := jsonb_build_object('code', 'unknown_product');
            CONTINUE;
        END IF;
        o_amount[i] := v_product.amount * p_quantities[i];
        IF p_claimed_amounts[i] IS NOT NULL AND p_claimed_amounts[i] <> o_amount[i] THEN
            o_outcome[i] := 'amount_mismatch';
            o_body[i] := jsonb_build_object('code', 'amount_mismatch', 'expected_amount', o_amount[i]);
            CONTINUE;
        END IF;
        op_currency[i] := v_product.currency;
        op_creates[i] := TRUE;
    END LOOP;

    -- Wallets are made on first use, in key order, then every wallet of the
    -- batch is locked in key order and numbered.
    INSERT INTO wallet.wallets (user_id, currency)
    SELECT DISTINCT u.user_id, u.currency
    FROM unnest(p_user_ids, op_currency, op_creates) AS u(user_id, currency, creates)
    WHERE u.creates
    ORDER BY 1, 2
    ON CONFLICT DO NOTHING;
    SELECT l.users, l.currencies, l.balances, l.op_wallet INTO w_users, w_currencies, w_balances, op_wallet
    FROM wallet.lock_wallets(p_user_ids, op_currency) l;
    w_changed := array_fill(FALSE, ARRAY[cardinality(w_users)]);

    -- Second pass, in order: what one operation at a time would do.
    FOR i IN 1 .. v_count LOOP
        CONTINUE WHEN o_outcome[i] IS NOT NULL;
        v_credit := op_credit[i];
        IF v_credit.flow_no IS NOT NULL THEN
            IF v_credit.user_id = p_user_ids[i] AND v_credit.product_id = p_product_ids[i]
               AND v_credit.quantity = p_quantities[i] THEN
                o_outcome[i] := 'replayed';
                o_body[i] := jsonb_build_object('credit', wallet.credit_json(v_credit), 'balance',
                    jsonb_build_object('user_id', v_credit.user_id, 'currency', v_credit.currency,
                                       'balance', w_balances[op_wallet[i]]));
            ELSE
                o_outcome[i] := 'flow_no_conflict';
                o_body[i] := jsonb_build_object('code', 'flow_no_conflict');
            END IF;
            CONTINUE;
        END IF;
        v_earlier := g_credited[op_first[i]];
        IF v_earlier IS NOT NULL THEN
            IF p_user_ids[v_earlier] = p_user_ids[i] AND p_product_ids[v_earlier] = p_product_ids[i]
               AND p_quantities[v_earlier] = p_quantities[i] THEN
                o_outcome[i] := 'replayed';
                o_body[i] := jsonb_build_object('credit', o_credit[v_earlier], 'balance',
                    jsonb_build_object('user_id', p_user_ids[i], 'currency', op_currency[v_earlier],
                                       'balance', w_balances[op_wallet[v_earlier]]));
            ELSE
                o_outcome[i] := 'flow_no_conflict';
                o_body[i] := jsonb_build_object('code', 'flow_no_conflict');
            END IF;
            CONTINUE;
        END IF;

        v_wallet := op_wallet[i];
        w_balances[v_wallet] := w_balances[v_wallet] + o_amount[i];
        w_changed[v_wallet] := TRUE;
        -- Drawn while the wallet is locked, so ids follow the wallet's order.
        o_entry[i] := nextval('wallet.entries_id_seq');
        o_after[i] := w_balances[v_wallet];
        o_new[i] := TRUE;
        v_new_count := v_new_count + 1;
        g_credited[op_first[i]] := i;
        o_credit[i] := jsonb_build_object(
            'flow_no', p_flow_nos[i], 'user_id', p_user_ids[i], 'product_id', p_product_ids[i],
            'quantity', p_quantities[i], 'currency', op_currency[i], 'amount', o_amount[i],
            'status', 'credited', 'entry_id', o_entry[i], 'created_at', v_created_at);
        o_outcome[i] := 'credited';
        o_body[i] := jsonb_build_object('credit', o_credit[i],
                                        'balance', jsonb_build_object('user_id', p_user_ids[i], 'currency', op_currency[i],
                                                                      'balance', o_after[i]));
    END LOOP;

    IF v_new_count > 0 THEN
        -- The unique flowNO decides a race with another transaction.
        INSERT INTO wallet.credits (flow_no, user_id, product_id, quantity, currency, amount,
                                    source, environment, client, entry_id)
        SELECT u.flow_no, u.user_id, u.product_id, u.quantity, u.currency, u.amount, u.source, u.environment,
               u.client, u.entry
        FROM unnest(p_flow_nos, p_user_ids, p_product_ids, p_quantities, op_currency, o_amount, p_sources,
                    p_environments, p_clients, o_entry, o_new)
             AS u(flow_no, user_id, product_id, quantity, currency, amount, source, environment, client, entry, new)
        WHERE u.new
        ON CONFLICT (flow_no) DO NOTHING;
        GET DIAGNOSTICS v_written = ROW_COUNT;
        IF v_written <> v_new_count THEN
            RAISE EXCEPTION 'credit_many: a flowNO of this batch was credited concurrently' USING ERRCODE = 'WL008';
        END IF;

        UPDATE wallet.wallets w SET balance = c.balance, updated_at = now()
        FROM unnest(w_users, w_currencies, w_balances, w_changed) AS c(user_id, currency, balance, changed)
        WHERE c.changed AND w.user_id = c.user_id AND w.currency = c.currency;

        INSERT INTO wallet.entries (id, user_id, currency, amount, balance_after, kind, reference, client)
        SELECT u.entry, u.user_id, u.currency, u.amount, u.after, 'credit', u.flow_no, u.client
        FROM unnest(o_entry, p_user_ids, op_currency, o_amount, o_after, p_flow_nos, p_clients, o_new)
             AS u(entry, user_id, currency, amount, after, flow_no, client, new)
        WHERE u.new
        ORDER BY u.entry;
    END IF;

    RETURN QUERY
    SELECT u.ord::INTEGER, u.outcome, u.body
    FROM unnest(o_outcome, o_body) WITH ORDINALITY AS u(outcome, body, ord)
    ORDER BY u.ord;
END;
$$;

-- Spends from a wallet under an idempotency key, never below zero.
--
-- Outcomes: debited, insufficient_funds (both stored under the key and
-- replayed for a retry with the same request), idempotency_key_reused (the
-- key was used for another request), unknown_currency. `replayed` is true
-- for an answer that comes from an earlier request; `request_id` is the id
-- of the request that first got it.
CREATE FUNCTION wallet.debit_many(
    p_clients TEXT[], p_keys TEXT[], p_request_hashes BYTEA[], p_user_ids TEXT[], p_currencies TEXT[],
    p_amounts BIGINT[], p_reasons TEXT[], p_metadata JSONB[], p_request_ids TEXT[])
RETURNS TABLE (ord INTEGER, outcome TEXT, replayed BOOLEAN, body JSONB, request_id TEXT)
LANGUAGE plpgsql
SET enable_seqscan = off
SET plan_cache_mode = force_generic_plan
AS $$
#variable_conflict use_column
DECLARE
    v_count      INTEGER := coalesce(array_length(p_keys, 1), 0);
    v_created_at TEXT := wallet.rfc3339(now());
    -- Per operation, read in one query: whether a product uses its
    -- currency, the outcome already stored under its key, and the first
    -- operation of the batch with the same key.
    op_currency_ok BOOLEAN[];
    op_stored      wallet.idempotency_keys[];
    op_first       INTEGER[];
    -- Per operation: its wallet's number among the locked ones (NULL for a
    -- wallet that does not exist, whose balance is 0).
    op_wallet      INTEGER[];
    w_users        TEXT[];
    w_currencies   TEXT[];
    w_balances     BIGINT[];
    w_changed      BOOLEAN[];
    -- Per operation, the results.
    o_outcome      TEXT[] := array_fill(NULL::TEXT, ARRAY[v_count]);
    o_replayed     BOOLEAN[] := array_fill(FALSE, ARRAY[v_count]);
    o_body         JSONB[] := array_fill(NULL::JSONB, ARRAY[v_count]);
    o_request_id   TEXT[] := array_fill(NULL::TEXT, ARRAY[v_count]);
    o_store        BOOLEAN[] := array_fill(FALSE, ARRAY[v_count]);
    o_entry        BIGINT[] := array_fill(NULL::BIGINT, ARRAY[v_count]);
    o_after        BIGINT[] := array_fill(NULL::BIGINT, ARRAY[v_count]);
    o_metadata     JSONB[] := array_fill(NULL::JSONB, ARRAY[v_count]);
    -- By first operation of a key: the operation whose outcome is stored.
    g_stored       INTEGER[] := array_fill(NULL::INTEGER, ARRAY[v_count]);
    v_record       wallet.idempotency_keys;
    v_earlier      INTEGER;
    v_wallet       INTEGER;
    v_balance      BIGINT;
    v_stored       INTEGER := 0;
    v_written      INTEGER;
BEGIN
    PERFORM wallet.require_equal_lengths('debit_many', cardinality(p_clients), v_count,
        cardinality(p_request_hashes), cardinality(p_user_ids), cardinality(p_currencies), cardinality(p_amounts),
        cardinality(p_reasons), cardinality(p_metadata), cardinality(p_request_ids));
    IF v_count = 0 THEN
        RETURN;
    END IF;
    IF EXISTS (SELECT 1 FROM unnest(p_amounts) a WHERE a IS NULL OR a NOT BETWEEN 1 AND 1000000000000) THEN
        RAISE EXCEPTION 'debit_many: amount out of range' USING ERRCODE = 'WL003';
    END IF;

    SELECT l.users, l.currencies, l.balances, l.op_wallet INTO w_users, w_currencies, w_balances, op_wallet
    FROM wallet.lock_wallets(p_user_ids, p_currencies) l;
    w_changed := array_fill(FALSE, ARRAY[cardinality(w_users)]);

    SELECT array_agg(u.currency = ANY (ARRAY(SELECT DISTINCT p.currency FROM wallet.products p)) ORDER BY u.ord),
           array_agg(k ORDER BY u.ord), array_agg(u.first ORDER BY u.ord)
    INTO op_currency_ok, op_stored, op_first
    FROM (SELECT x.client, x.key, x.currency, x.ord,
                 min(x.ord) OVER (PARTITION BY x.client, x.key)::INTEGER AS first
          FROM unnest(p_clients, p_keys, p_currencies) WITH ORDINALITY AS x(client, key, currency, ord)) u
    LEFT JOIN wallet.idempotency_keys k ON k.client = u.client AND k.key = u.key;

    FOR i IN 1 .. v_count LOOP
        IF NOT op_currency_ok[i] THEN
            o_outcome[i] := 'unknown_currency';
            o_body[i] := jsonb_build_object('code', 'unknown_currency');
            CONTINUE;
        END IF;

        -- A key with a stored outcome: replay it, or refuse another request.
        v_record := op_stored[i];
        IF v_record.key IS NOT NULL THEN
            IF v_record.request_hash = p_request_hashes[i] THEN
                o_outcome[i] := v_record.outcome;
                o_replayed[i] := TRUE;
                o_body[i] := v_record.response;
                o_request_id[i] := v_record.request_id;
            ELSE
                o_outcome[i] := 'idempotency_key_reused';
                o_body[i] := jsonb_build_object('code', 'idempotency_key_reused');
            END IF;
            CONTINUE;
        END IF;
        -- The same, for a key decided earlier in this batch.
        v_earlier := g_stored[op_first[i]];
        IF v_earlier IS NOT NULL THEN
            IF p_request_hashes[v_earlier] = p_request_hashes[i] THEN
                o_outcome[i] := o_outcome[v_earlier];
                o_replayed[i] := TRUE;
                o_body[i] := o_body[v_earlier];
                o_request_id[i] := o_request_id[v_earlier];
            ELSE
                o_outcome[i] := 'idempotency_key_reused';
                o_body[i] := jsonb_build_object('code', 'idempotency_key_reused');
            END IF;
            CONTINUE;
        END IF;

        g_stored[op_first[i]] := i;
        o_store[i] := TRUE;
        v_stored := v_stored + 1;
        o_request_id[i] := p_request_ids[i];
        v_wallet := op_wallet[i];
        v_balance := CASE WHEN v_wallet IS NULL THEN 0 ELSE w_balances[v_wallet] END;
        IF v_balance >= p_amounts[i] THEN
            v_balance := v_balance - p_amounts[i];
            w_balances[v_wallet] := v_balance;
            w_changed[v_wallet] := TRUE;
            -- Drawn while the wallet is locked, so ids follow the wallet's order.
            o_entry[i] := nextval('wallet.entries_id_seq');
            o_after[i] := v_balance;
            o_outcome[i] := 'debited';
            o_body[i] := jsonb_build_object(
                'debit', jsonb_build_object(
                    'id', o_entry[i], 'user_id', p_user_ids[i], 'currency', p_currencies[i],
                    'amount', p_amounts[i], 'reason', p_reasons[i], 'entry_id', o_entry[i],
                    'created_at', v_created_at),
                'balance', jsonb_build_object('user_id', p_user_ids[i], 'currency', p_currencies[i],
                                              'balance', v_balance));
            IF p_reasons[i] IS NOT NULL OR p_metadata[i] IS NOT NULL THEN
                o_metadata[i] := jsonb_strip_nulls(jsonb_build_object('reason', p_reasons[i]))
                    || CASE WHEN p_metadata[i] IS NULL THEN '{}'::JSONB
                            ELSE jsonb_build_object('metadata', p_metadata[i]) END;
            END IF;
        ELSE
            o_outcome[i] := 'insufficient_funds';
            o_body[i] := jsonb_build_object('code', 'insufficient_funds', 'balance', v_balance);
        END IF;
    END LOOP;

    IF v_stored > 0 THEN
        -- The key's primary key decides a race with another transaction.
        INSERT INTO wallet.idempotency_keys (client, key, request_hash, outcome, response, request_id, entry_id)
        SELECT u.client, u.key, u.hash, u.outcome, u.body, u.request_id, u.entry
        FROM unnest(p_clients, p_keys, p_request_hashes, o_outcome, o_body, p_request_ids, o_entry, o_store)
             AS u(client, key, hash, outcome, body, request_id, entry, store)
        WHERE u.store
        ON CONFLICT DO NOTHING;
        GET DIAGNOSTICS v_written = ROW_COUNT;
        IF v_written <> v_stored THEN
            RAISE EXCEPTION 'debit_many: a key of this batch was used concurrently' USING ERRCODE = 'WL008';
        END IF;

        UPDATE wallet.wallets w SET balance = c.balance, updated_at = now()
        FROM unnest(w_users, w_currencies, w_balances, w_changed) AS c(user_id, currency, balance, changed)
        WHERE c.changed AND w.user_id = c.user_id AND w.currency = c.currency;

        INSERT INTO wallet.entries (id, user_id, currency, amount, balance_after, kind, reference, client, metadata)
        SELECT u.entry, u.user_id, u.currency, -u.amount, u.after, 'debit', u.key, u.client, u.metadata
        FROM unnest(o_entry, p_user_ids, p_currencies, p_amounts, o_after, p_keys, p_clients, o_metadata)
             AS u(entry, user_id, currency, amount, after, key, client, metadata)
        WHERE u.entry IS NOT NULL
        ORDER BY u.entry;
    END IF;

    RETURN QUERY
    SELECT u.ord::INTEGER, u.outcome, u.replayed, u.body, u.request_id
    FROM unnest(o_outcome, o_replayed, o_body, o_request_id) WITH ORDINALITY AS u(outcome, replayed, body, request_id, ord)
    ORDER BY u.ord;
END;
$$;

-- Deletes idempotency records older than `p_before`, at most `p_limit` of
-- them, and says how many went. The service calls it in small rounds.
CREATE FUNCTION wallet.purge_idempotency_keys(p_before TIMESTAMPTZ, p_limit INTEGER) RETURNS INTEGER
LANGUAGE sql AS $$
    WITH doomed AS (
        SELECT k.client, k.key FROM wallet.idempotency_keys k
        WHERE k.created_at < p_before
        LIMIT p_limit
        FOR UPDATE SKIP LOCKED
    ), deleted AS (
        DELETE FROM wallet.idempotency_keys k USING doomed d
        WHERE k.client = d.client AND k.key = d.key
        RETURNING 1
    )
    SELECT count(*)::INTEGER FROM deleted;
$$;
