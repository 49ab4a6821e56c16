-- wallet.credit_many, re-applied by the migrator whenever this file
-- changes (first defined in 0002_credits_and_debits.sql).
--
-- Lock order, everywhere: flowNO locks (wallet.lock_flow_nos, in key order)
-- first, then wallet rows in (user_id, currency) order, then credit rows.

-- Credits a product bundle per flowNO, exactly once.
--
-- Outcomes: credited, replayed, flow_no_conflict, unknown_product,
-- amount_mismatch (the caller claimed an amount other than catalog ×
-- quantity), revoked (Apple's decisive word on this never-credited flowNO
-- is a REFUND; see wallet.appstore_refund_states).
--
-- The batch's flowNOs are locked first (wallet.lock_flow_nos), before
-- anything is read, so a credit and Apple's refund of the same flowNO
-- serialize: either the credit commits first and the refund then refunds
-- it, or the refund commits first and the credit is refused as revoked.
-- The flowNO is looked up before the catalog, so a retry still replays after
-- its product was repriced or deactivated. A replay answers with the credit
-- and the balance as they are now.
CREATE OR REPLACE FUNCTION wallet.credit_many(
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
    PERFORM wallet.lock_flow_nos(p_flow_nos);

    SELECT array_agg(c ORDER BY u.ord), array_agg(p ORDER BY u.ord), array_agg(r.flow_no IS NOT NULL ORDER BY u.ord),
           array_agg(u.first ORDER BY u.ord)
    INTO op_credit, op_product, op_revoked, op_first
    FROM (SELECT x.flow_no, x.product_id, x.ord,
                 min(x.ord) OVER (PARTITION BY x.flow_no)::INTEGER AS first
          FROM unnest(p_flow_nos, p_product_ids) WITH ORDINALITY AS x(flow_no, product_id, ord)) u
    LEFT JOIN wallet.credits c ON c.flow_no = u.flow_no
    LEFT JOIN wallet.products p ON p.product_id = u.product_id AND p.active
    LEFT JOIN wallet.appstore_refund_states r ON r.flow_no = u.flow_no AND r.notification_type = 'REFUND';

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
        -- The flowNO locks keep other credits of these flowNOs out; the
        -- unique flowNO still stops a writer that bypasses them.
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
