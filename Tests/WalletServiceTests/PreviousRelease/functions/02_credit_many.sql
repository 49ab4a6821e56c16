-- wallet.credit_many, re-applied by the migrator whenever this file
-- changes (first defined in 0002_credits_and_debits.sql; typed in 0007).
--
-- Lock order, everywhere: flowNO locks (wallet.lock_flow_nos, in key order)
-- first, then wallet rows in (user_id, currency) order, then credit rows.

-- Credits a product bundle per flowNO, exactly once, one result per
-- request, in order. The outcome of a request is what it would be applied
-- alone, one after another in batch order, duplicates included.
--
-- Outcomes: credited, replayed, flow_no_conflict (the flowNO is credited
-- to another user, product or quantity, or the request's Google purchase
-- token is credited under another flowNO), unknown_product,
-- amount_mismatch (the caller claimed an amount other than catalog ×
-- quantity), revoked (Apple's decisive word on this never-credited flowNO
-- is a REFUND, see wallet.appstore_refund_states; or Google voided this
-- never-credited purchase token, see wallet.googleplay_voids).
--
-- p_purchase_tokens holds, per request, its Google Play purchase token (NULL
-- for other stores; the array itself may be NULL). A Google Play credit also
-- queues its consume call in wallet.outbox, in the same transaction: once
-- credited, the purchase is consumed.
--
-- The batch's flowNOs are locked first (wallet.lock_flow_nos), before
-- anything is read, so a credit and Apple's refund of the same flowNO
-- serialize: either the credit commits first and the refund then refunds
-- it, or the refund commits first and the credit is refused as revoked.
-- The flowNO is looked up before the catalog, so a retry still replays after
-- its product was repriced or deactivated. A replay answers with the credit
-- and the balance as they are now.
--
-- The planner settings are wallet.debit_many's, for the same reasons: a
-- plan cached while the credit table was analyzed empty scans it
-- sequentially, and array parameters had statements planned again on
-- calls (one-credit calls ran at 1,066/s with re-planning and 2,070/s
-- without; 16-credit calls the same either way).
CREATE OR REPLACE FUNCTION wallet.credit_many(p_requests wallet.credit_request[], p_purchase_tokens TEXT[])
RETURNS SETOF wallet.credit_result
LANGUAGE plpgsql
SET enable_seqscan = off
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    v_count     INTEGER := coalesce(cardinality(p_requests), 0);
    -- Per request, read in one query: the credit already committed for its
    -- flowNO, its product, whether Apple revoked the flowNO, and the first
    -- request of the batch with the same flowNO.
    op_credit   wallet.credits[];
    op_product  wallet.products[];
    op_revoked  BOOLEAN[];
    op_first    INTEGER[];
    -- Per request: whether its purchase token is credited under another flowNO.
    op_token_elsewhere BOOLEAN[];
    -- Per request: the wallet it touches (NULL for none), and that wallet's
    -- number among the locked ones.
    op_key      wallet.wallet_key[] := array_fill(NULL::wallet.wallet_key, ARRAY[v_count]);
    op_wallet   INTEGER[];
    v_wallets   wallet.batch_wallet[];
    v_results   wallet.credit_result[] := array_fill(NULL::wallet.credit_result, ARRAY[v_count]);
    -- What the batch writes: credits, and their ledger entries.
    v_credits   wallet.credits[] := '{}';
    v_entries   wallet.entries[] := '{}';
    -- By first request of a flowNO: the request that credited it here.
    g_credited  INTEGER[] := array_fill(NULL::INTEGER, ARRAY[v_count]);
    r           wallet.credit_request;
    v_first     wallet.credit_request;
    v_token     TEXT;
    v_credit    wallet.credits;
    v_product   wallet.products;
    v_wallet    wallet.batch_wallet;
    v_result    wallet.credit_result;
    v_amount    BIGINT;
    v_earlier   INTEGER;
    v_entry_id  BIGINT;
    v_written   INTEGER;
BEGIN
    IF v_count = 0 THEN
        RETURN;
    END IF;
    PERFORM wallet.lock_flow_nos(ARRAY(SELECT q.flow_no FROM unnest(p_requests) q));

    SELECT array_agg(c ORDER BY u.ord), array_agg(p ORDER BY u.ord),
           array_agg(s.flow_no IS NOT NULL OR v.voided ORDER BY u.ord),
           array_agg(u.first ORDER BY u.ord), array_agg(t.flow_no IS NOT NULL ORDER BY u.ord)
    INTO op_credit, op_product, op_revoked, op_first, op_token_elsewhere
    FROM (SELECT q.flow_no, q.product_id, p_purchase_tokens[q.ordinality] AS purchase_token, q.ordinality AS ord,
                 min(q.ordinality) OVER (PARTITION BY q.flow_no)::INTEGER AS first
          FROM unnest(p_requests) WITH ORDINALITY q) u
    LEFT JOIN wallet.credits c ON c.flow_no = u.flow_no
    LEFT JOIN wallet.products p ON p.product_id = u.product_id AND p.active
    LEFT JOIN wallet.appstore_refund_states s ON s.flow_no = u.flow_no AND s.notification_type = 'REFUND'
    LEFT JOIN wallet.credits t ON t.purchase_token = u.purchase_token AND t.flow_no <> u.flow_no
    LEFT JOIN LATERAL (SELECT TRUE AS voided FROM wallet.googleplay_voids g
                       WHERE g.purchase_token = u.purchase_token LIMIT 1) v ON TRUE;

    -- First pass: settle what does not depend on order, and name each
    -- request's wallet.
    FOR i IN 1 .. v_count LOOP
        r := p_requests[i];
        v_credit := op_credit[i];
        v_product := op_product[i];
        IF v_credit.flow_no IS NOT NULL THEN
            IF v_credit.user_id = r.user_id THEN
                op_key[i] := ROW(r.user_id, v_credit.currency);
            END IF;
        ELSIF op_token_elsewhere[i] THEN
            v_results[i] := ROW('flow_no_conflict', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL);
        ELSIF op_revoked[i] THEN
            v_results[i] := ROW('revoked', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL);
        ELSIF v_product.product_id IS NULL THEN
            v_results[i] := ROW('unknown_product', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL);
        ELSIF r.claimed_amount IS NOT NULL AND r.claimed_amount <> v_product.amount * r.quantity THEN
            v_results[i] := ROW('amount_mismatch', NULL, NULL, NULL, NULL, NULL, NULL, v_product.amount * r.quantity, NULL);
        ELSE
            op_key[i] := ROW(r.user_id, v_product.currency);
        END IF;
    END LOOP;

    SELECT l.wallets, l.op_wallet INTO v_wallets, op_wallet FROM wallet.lock_batch_wallets(op_key, TRUE) l;

    -- Second pass, in order: what one request at a time would do.
    FOR i IN 1 .. v_count LOOP
        CONTINUE WHEN (v_results[i]).outcome IS NOT NULL;
        r := p_requests[i];
        v_token := p_purchase_tokens[i];
        v_credit := op_credit[i];
        v_earlier := g_credited[op_first[i]];
        IF v_credit.flow_no IS NOT NULL THEN
            IF v_credit.user_id = r.user_id AND v_credit.product_id = r.product_id AND v_credit.quantity = r.quantity
               AND v_credit.purchase_token IS NOT DISTINCT FROM v_token THEN
                v_results[i] := ROW('replayed', v_credit.currency, v_credit.amount, v_credit.status, v_credit.entry_id,
                                    v_credit.created_at, (v_wallets[op_wallet[i]]).balance, NULL,
                                    (v_wallets[op_wallet[i]]).held);
            ELSE
                v_results[i] := ROW('flow_no_conflict', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL);
            END IF;
        ELSIF v_earlier IS NOT NULL THEN
            -- A flowNO credited earlier in this batch.
            v_first := p_requests[v_earlier];
            IF v_first.user_id = r.user_id AND v_first.product_id = r.product_id AND v_first.quantity = r.quantity
               AND p_purchase_tokens[v_earlier] IS NOT DISTINCT FROM v_token THEN
                v_result := v_results[v_earlier];
                v_result.outcome := 'replayed';
                v_result.balance := (v_wallets[op_wallet[v_earlier]]).balance;
                v_result.held := (v_wallets[op_wallet[v_earlier]]).held;
                v_results[i] := v_result;
            ELSE
                v_results[i] := ROW('flow_no_conflict', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL);
            END IF;
        ELSE
            g_credited[op_first[i]] := i;
            v_product := op_product[i];
            v_amount := v_product.amount * r.quantity;
            v_wallet := v_wallets[op_wallet[i]];
            v_wallet.balance := v_wallet.balance + v_amount;
            v_wallet.changed := TRUE;
            v_wallets[op_wallet[i]] := v_wallet;
            -- Drawn while the wallet is locked, so ids follow the wallet's order.
            v_entry_id := nextval('wallet.entries_id_seq');
            v_results[i] := ROW('credited', v_product.currency, v_amount, 'credited', v_entry_id, now(),
                                v_wallet.balance, NULL, v_wallet.held);
            -- Columns in the tables' order.
            v_credits[cardinality(v_credits) + 1] := ROW(
                r.flow_no, r.user_id, r.product_id, r.quantity, v_product.currency, v_amount, 'credited', r.source,
                r.environment, r.client, v_entry_id, NULL, NULL, now(), now(), v_token)::wallet.credits;
            v_entries[cardinality(v_entries) + 1] := ROW(
                v_entry_id, r.user_id, v_product.currency, v_amount, v_wallet.balance, 'credit', r.flow_no, r.client,
                now(), NULL)::wallet.entries;
        END IF;
    END LOOP;

    IF cardinality(v_credits) > 0 THEN
        -- The flowNO locks keep other credits of these flowNOs out; the
        -- unique flowNO still stops a writer that bypasses them.
        INSERT INTO wallet.credits (flow_no, user_id, product_id, quantity, currency, amount,
                                    source, environment, client, entry_id, purchase_token)
        SELECT c.flow_no, c.user_id, c.product_id, c.quantity, c.currency, c.amount, c.source, c.environment,
               c.client, c.entry_id, c.purchase_token
        FROM unnest(v_credits) c
        ON CONFLICT (flow_no) DO NOTHING;
        GET DIAGNOSTICS v_written = ROW_COUNT;
        PERFORM wallet.finish_batch('credit_many', v_written, cardinality(v_credits), v_wallets, v_entries);
        INSERT INTO wallet.outbox (kind, key, flow_no, environment, window_ends_at)
        SELECT 'googleplay_consume', c.purchase_token, c.flow_no, c.environment, now() + INTERVAL '3 days'
        FROM unnest(v_credits) c
        WHERE c.purchase_token IS NOT NULL
        ON CONFLICT (kind, key) DO NOTHING;
    END IF;

    RETURN QUERY SELECT * FROM unnest(v_results);
END;
$$;

-- The previous release's call, without purchase tokens: instances not yet
-- upgraded keep crediting while the new ones start.
CREATE OR REPLACE FUNCTION wallet.credit_many(p_requests wallet.credit_request[])
RETURNS SETOF wallet.credit_result
LANGUAGE sql AS $$
    SELECT * FROM wallet.credit_many(p_requests, NULL::TEXT[]);
$$;
