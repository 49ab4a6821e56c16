-- wallet.credit_many, re-applied by the migrator whenever this file
-- changes (first defined in 0002_credits_and_debits.sql; typed in 0007; one
-- composite per operation, posted through wallet.post_entries, since 0017;
-- a product's other lines since 0032).
--
-- Lock order, everywhere: flowNO locks (wallet.lock_flow_nos, in key order)
-- first, then Google Play purchase-token locks (wallet.lock_purchase_tokens,
-- in key order), then wallet rows in (user_id, currency) order, then credit
-- rows.

-- Credits a product bundle per flowNO, exactly once, one result per
-- operation, in order. The outcome of an operation is what it would be
-- applied alone, one after another in batch order, duplicates included.
--
-- Outcomes: credited, replayed, flow_no_conflict (the flowNO is credited
-- to another user, product or quantity, or the operation's Google purchase
-- token is credited under another flowNO), unknown_product,
-- amount_mismatch (the caller claimed an amount other than catalog ×
-- quantity), revoked (Apple's decisive word on this never-credited flowNO
-- is a REFUND, see wallet.appstore_refund_states; or Google voided this
-- never-credited purchase token, see wallet.googleplay_voids).
--
-- A Google Play credit also queues its consume call in wallet.outbox, in the
-- same transaction: once credited, the purchase is consumed. A credit of a
-- product with a bonus (wallet.product_bonuses) posts the bonus beside it:
-- a `bonus` entry under the same flowNO, right after the credit's, making
-- a free lot that expires as the bonus says. A product with other lines
-- (wallet.product_lines) posts each after that: a `credit` entry in the
-- line's currency under the same flowNO, a paid lot, recorded in
-- wallet.credit_lines.
--
-- The batch's flowNOs are locked first (wallet.lock_flow_nos), then its
-- Google Play purchase tokens (wallet.lock_purchase_tokens), before
-- anything is read, so a credit and Apple's refund of the same flowNO, or
-- a credit and Google's void of the same token, serialize: either the
-- credit commits first and the refund then refunds it, or the refund
-- commits first and the credit is refused as revoked. A Google void locks
-- the token, not a flowNO: the orderId a push names need not be the one the
-- purchase is credited under. Then the wallets are locked, in key order
-- (wallet.lock_batch_wallets), and the credits are posted to them.
-- The flowNO is looked up before the catalog, so a retry still replays after
-- its product was repriced or deactivated. A replay answers with the credit
-- and the balance as they are now.
--
-- The planner settings are wallet.debit_many's, for the same reasons: a
-- plan cached while the credit table was analyzed empty scans it
-- sequentially, and array parameters had statements planned again on
-- calls (one-credit calls ran at 1,066/s with re-planning and 2,070/s
-- without; 16-credit calls the same either way).
CREATE OR REPLACE FUNCTION wallet.credit_many(p_operations wallet.credit_operation[])
RETURNS SETOF wallet.credit_result
LANGUAGE plpgsql
SET enable_seqscan = off
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    v_count    INTEGER := coalesce(cardinality(p_operations), 0);
    v_states   wallet.credit_state[];
    v_wallets  wallet.batch_wallet[];
    op_wallet  INTEGER[];
    -- The answers, one per operation; the credits the batch makes, and per
    -- credit its posting's place (its bonus's follows); per operation, the
    -- posting of the credit it made or replays from earlier in the batch.
    v_results  wallet.credit_result[] := array_fill(NULL::wallet.credit_result, ARRAY[v_count]);
    v_credits  wallet.credits[] := '{}';
    v_postings wallet.posting[] := '{}';
    v_credit_posting INTEGER[] := '{}';
    op_posting INTEGER[] := array_fill(NULL::INTEGER, ARRAY[v_count]);
    -- By first operation of a flowNO: the credit the batch made for it.
    g_credited INTEGER[] := array_fill(NULL::INTEGER, ARRAY[v_count]);
    -- An operation's bonus and other lines, and where their wallets' keys
    -- start (wallet.credit_wallet_keys).
    v_extra    wallet.posting[];
    v_extra_at INTEGER := v_count;
    o          wallet.credit_operation;
    s          wallet.credit_state;
    v_wallet   wallet.batch_wallet;
    v_credit   wallet.credits;
BEGIN
    IF v_count = 0 THEN
        RETURN;
    END IF;
    PERFORM wallet.lock_flow_nos(ARRAY(SELECT q.flow_no FROM unnest(p_operations) q));
    PERFORM wallet.lock_purchase_tokens(ARRAY(SELECT q.purchase_token FROM unnest(p_operations) q));
    v_states := wallet.credit_states(p_operations);
    -- Each operation's wallet, then the wallets of each one's extra postings.
    SELECT l.wallets, l.op_wallet INTO v_wallets, op_wallet
    FROM wallet.lock_batch_wallets(wallet.credit_wallet_keys(p_operations, v_states), TRUE) l;

    -- In order: what one operation at a time would do.
    FOR i IN 1 .. v_count LOOP
        o := p_operations[i];
        s := v_states[i];
        v_wallet := v_wallets[op_wallet[i]];
        v_extra := wallet.extra_postings(o, s);
        -- The credit this flowNO already has: committed, or made earlier in the batch.
        v_credit := CASE WHEN (s.credit).flow_no IS NOT NULL THEN s.credit
                         ELSE v_credits[g_credited[s.first]] END;
        IF s.refusal IS NOT NULL THEN
            v_results[i] := wallet.credit_refused(s.refusal, (s.product).amount * o.quantity);
        ELSIF v_credit.flow_no IS NOT NULL THEN
            v_results[i] := CASE WHEN wallet.same_credit(v_credit, o) THEN wallet.credit_answer('replayed', v_credit, v_wallet)
                                 ELSE wallet.credit_refused('flow_no_conflict') END;
            -- A replay of a credit made in this batch names its entry too.
            op_posting[i] := CASE WHEN (v_results[i]).outcome = 'replayed' THEN v_credit_posting[g_credited[s.first]] END;
        ELSE
            v_credit := wallet.new_credit(o, s.product);
            v_credits[cardinality(v_credits) + 1] := v_credit;
            op_posting[i] := cardinality(v_postings) + 1;
            v_credit_posting[cardinality(v_credits)] := op_posting[i];
            g_credited[s.first] := cardinality(v_credits);
            -- The credit's posting, then its extras', each in its wallet.
            v_postings := v_postings || wallet.credit_posting(v_credit) || v_extra;
            v_wallets := wallet.batch_wallets_plus(
                v_wallets, op_wallet[i] || op_wallet[v_extra_at + 1 : v_extra_at + cardinality(v_extra)],
                wallet.credit_posting(v_credit) || v_extra);
            -- The answer's balance counts a bonus in the credit's own currency.
            v_results[i] := wallet.credit_answer('credited', v_credit, v_wallets[op_wallet[i]]);
        END IF;
        v_extra_at := v_extra_at + cardinality(v_extra);
    END LOOP;

    RETURN QUERY SELECT * FROM unnest(wallet.post_credits(v_results, op_posting, v_postings, v_credits, v_credit_posting));
END;
$$;

-- The wallets a batch of credits locks (wallet.lock_batch_wallets): each
-- operation's, in order, then those of each operation's extra postings
-- (wallet.extra_postings), operation by operation.
CREATE OR REPLACE FUNCTION wallet.credit_wallet_keys(p_operations wallet.credit_operation[],
                                                     p_states wallet.credit_state[])
RETURNS wallet.wallet_key[]
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN ARRAY(SELECT x.wallet FROM unnest(p_states) WITH ORDINALITY x ORDER BY x.ordinality)
        || ARRAY(SELECT ROW(e.user_id, e.currency)::wallet.wallet_key
                 FROM generate_subscripts(p_states, 1) i
                 CROSS JOIN LATERAL unnest(wallet.extra_postings(p_operations[i], p_states[i])) WITH ORDINALITY e
                 ORDER BY i, e.ordinality);
END;
$$;

-- What a credit of an operation posts beside the credit's own entry: the
-- product's bonus, then its other lines in currency order. None for an
-- operation that credits nothing new: refused, or its flowNO credited
-- before the batch. (An operation whose flowNO an earlier one of the batch
-- credits gets them too, and posts none of them: their wallets are only
-- locked.)
CREATE OR REPLACE FUNCTION wallet.extra_postings(p_operation wallet.credit_operation, p_state wallet.credit_state)
RETURNS wallet.posting[]
LANGUAGE plpgsql STABLE AS $$
BEGIN
    -- Most products have neither: no array is built for them.
    IF (p_state.credit).flow_no IS NOT NULL OR p_state.wallet IS NULL
       OR ((p_state.bonus).product_id IS NULL AND coalesce(cardinality(p_state.lines), 0) = 0) THEN
        RETURN '{}';
    END IF;
    RETURN CASE WHEN (p_state.bonus).product_id IS NOT NULL THEN ARRAY[wallet.bonus_posting(p_operation, p_state.bonus)]
                ELSE '{}'::wallet.posting[] END
        || ARRAY(SELECT wallet.new_posting(
                     p_kind => 'credit', p_user_id => p_operation.user_id, p_currency => l.currency,
                     p_amount => l.amount * p_operation.quantity, p_reference => p_operation.flow_no,
                     p_client => p_operation.client,
                     p_data => jsonb_build_object('product_id', p_operation.product_id,
                                                  'quantity', p_operation.quantity, 'line', TRUE))
                 FROM unnest(p_state.lines) l ORDER BY l.currency);
END;
$$;

-- The batch's wallets with each posting's amount added to the balance of
-- the wallet numbered beside it (`p_numbers[i]` for `p_postings[i]`), as
-- the batch goes.
CREATE OR REPLACE FUNCTION wallet.batch_wallets_plus(p_wallets wallet.batch_wallet[], p_numbers INTEGER[],
                                                     p_postings wallet.posting[])
RETURNS wallet.batch_wallet[]
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    v_wallet wallet.batch_wallet;
BEGIN
    FOR i IN 1 .. cardinality(p_postings) LOOP
        v_wallet := p_wallets[p_numbers[i]];
        v_wallet.balance := v_wallet.balance + (p_postings[i]).amount;
        p_wallets[p_numbers[i]] := v_wallet;
    END LOOP;
    RETURN p_wallets;
END;
$$;

-- A credit's posting: its amount, under its flowNO.
CREATE OR REPLACE FUNCTION wallet.credit_posting(p_credit wallet.credits)
RETURNS wallet.posting
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    RETURN wallet.new_posting(
        p_kind => 'credit', p_user_id => p_credit.user_id, p_currency => p_credit.currency, p_amount => p_credit.amount,
        p_reference => p_credit.flow_no, p_client => p_credit.client, p_data => wallet.credit_event_data(p_credit));
END;
$$;

-- One operation's state (wallet.credit_state), field by field.
CREATE OR REPLACE FUNCTION wallet.credit_state_of(
    p_credit wallet.credits, p_product wallet.products, p_refusal TEXT, p_wallet wallet.wallet_key, p_first INTEGER,
    p_bonus wallet.product_bonuses, p_lines wallet.product_lines[])
RETURNS wallet.credit_state
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    v_state wallet.credit_state;
BEGIN
    v_state.credit := p_credit;
    v_state.product := p_product;
    v_state.refusal := p_refusal;
    v_state.wallet := p_wallet;
    v_state.first := p_first;
    v_state.bonus := p_bonus;
    v_state.lines := p_lines;
    RETURN v_state;
END;
$$;

-- What wallet.credit_many reads about each operation, in one query, once
-- the batch's flowNOs and tokens are locked: the credit committed under its
-- flowNO, its product (when active), the first operation of the batch with
-- its flowNO, the wallet it touches, and the refusal that does not depend on
-- batch order. A credited flowNO is decided by its credit alone; otherwise
-- the refusals come in this order: a purchase token credited under another
-- flowNO (flow_no_conflict), a purchase revoked before it was credited
-- (revoked), an unknown or inactive product (unknown_product), a claimed
-- amount that is not catalog × quantity (amount_mismatch).
CREATE OR REPLACE FUNCTION wallet.credit_states(p_operations wallet.credit_operation[])
RETURNS wallet.credit_state[]
LANGUAGE plpgsql AS $$
DECLARE
    v_states wallet.credit_state[];
BEGIN
    SELECT array_agg(wallet.credit_state_of(u.credit, u.product, u.refusal,
                         CASE WHEN (u.credit).flow_no IS NOT NULL THEN
                                  CASE WHEN (u.credit).user_id = u.user_id THEN
                                      ROW(u.user_id, (u.credit).currency)::wallet.wallet_key END
                              WHEN u.refusal IS NULL THEN ROW(u.user_id, (u.product).currency)::wallet.wallet_key
                         END,
                         u.first, u.bonus, u.lines) ORDER BY u.ord)
    INTO v_states
    FROM (SELECT q.ordinality AS ord, q.user_id, c AS credit, p AS product, b AS bonus,
                 ARRAY(SELECT pl FROM wallet.product_lines pl WHERE pl.product_id = p.product_id
                       ORDER BY pl.currency) AS lines,
                 min(q.ordinality) OVER (PARTITION BY q.flow_no)::INTEGER AS first,
                 CASE WHEN c.flow_no IS NOT NULL THEN NULL
                      WHEN t.flow_no IS NOT NULL THEN 'flow_no_conflict'
                      WHEN s.flow_no IS NOT NULL OR v.voided THEN 'revoked'
                      WHEN p.product_id IS NULL THEN 'unknown_product'
                      WHEN q.claimed_amount <> p.amount * q.quantity THEN 'amount_mismatch'
                 END AS refusal
          FROM unnest(p_operations) WITH ORDINALITY q
          LEFT JOIN wallet.credits c ON c.flow_no = q.flow_no
          LEFT JOIN wallet.products p ON p.product_id = q.product_id AND p.active
          LEFT JOIN wallet.product_bonuses b ON b.product_id = p.product_id
          LEFT JOIN wallet.appstore_refund_states s ON s.flow_no = q.flow_no AND s.notification_type = 'REFUND'
          LEFT JOIN wallet.credits t ON t.purchase_token = q.purchase_token AND t.flow_no <> q.flow_no
          LEFT JOIN LATERAL (SELECT TRUE AS voided FROM wallet.googleplay_voids g
                             WHERE g.purchase_token = q.purchase_token LIMIT 1) v ON TRUE) u;
    RETURN v_states;
END;
$$;

-- Whether an operation asks for exactly the credit `p_credit` is: the same
-- user, product, quantity and purchase token.
CREATE OR REPLACE FUNCTION wallet.same_credit(p_credit wallet.credits, p_operation wallet.credit_operation)
RETURNS BOOLEAN
LANGUAGE sql IMMUTABLE
RETURN p_credit.user_id = p_operation.user_id AND p_credit.product_id = p_operation.product_id
       AND p_credit.quantity = p_operation.quantity
       AND p_credit.purchase_token IS NOT DISTINCT FROM p_operation.purchase_token;

-- The credit an operation makes, before its entry is posted: catalog amount
-- × quantity, fixed now.
CREATE OR REPLACE FUNCTION wallet.new_credit(p_operation wallet.credit_operation, p_product wallet.products)
RETURNS wallet.credits
LANGUAGE plpgsql STABLE AS $$
DECLARE
    v_credit wallet.credits;
BEGIN
    v_credit.flow_no := p_operation.flow_no;
    v_credit.user_id := p_operation.user_id;
    v_credit.product_id := p_operation.product_id;
    v_credit.quantity := p_operation.quantity;
    v_credit.currency := p_product.currency;
    v_credit.amount := p_product.amount * p_operation.quantity;
    v_credit.status := 'credited';
    v_credit.source := p_operation.source;
    v_credit.environment := p_operation.environment;
    v_credit.client := p_operation.client;
    v_credit.purchase_token := p_operation.purchase_token;
    v_credit.created_at := now();
    v_credit.updated_at := now();
    RETURN v_credit;
END;
$$;

-- The bonus a credit brings: the product's bonus per unit bought, under
-- the credit's flowNO, as a free lot that expires as the bonus says.
CREATE OR REPLACE FUNCTION wallet.bonus_posting(p_operation wallet.credit_operation, p_bonus wallet.product_bonuses)
RETURNS wallet.posting
LANGUAGE plpgsql STABLE AS $$
DECLARE
    v_expires_at TIMESTAMPTZ := now() + make_interval(days => p_bonus.expires_in_days);
BEGIN
    RETURN wallet.new_posting(
        p_kind => 'bonus', p_user_id => p_operation.user_id, p_currency => p_bonus.currency,
        p_amount => p_bonus.amount * p_operation.quantity, p_reference => p_operation.flow_no,
        p_client => p_operation.client, p_lot_source => 'bonus', p_lot_expires_at => v_expires_at,
        p_data => jsonb_strip_nulls(jsonb_build_object('product_id', p_operation.product_id,
                                                       'quantity', p_operation.quantity,
                                                       'expires_at', wallet.rfc3339(v_expires_at))));
END;
$$;

-- What a credit's event adds: the product, quantity, and how and where it
-- was verified.
CREATE OR REPLACE FUNCTION wallet.credit_event_data(p_credit wallet.credits)
RETURNS JSONB
LANGUAGE sql IMMUTABLE
RETURN jsonb_strip_nulls(jsonb_build_object('product_id', p_credit.product_id, 'quantity', p_credit.quantity,
                                            'source', p_credit.source, 'environment', p_credit.environment));

-- The answer for a credit that stands (credited now, or replayed): the
-- credit, and its wallet's balance and active holds at that point of the
-- batch.
CREATE OR REPLACE FUNCTION wallet.credit_answer(p_outcome TEXT, p_credit wallet.credits, p_wallet wallet.batch_wallet)
RETURNS wallet.credit_result
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    v_result wallet.credit_result;
BEGIN
    v_result.outcome := p_outcome;
    v_result.currency := p_credit.currency;
    v_result.amount := p_credit.amount;
    v_result.status := p_credit.status;
    v_result.entry_id := p_credit.entry_id;
    v_result.created_at := p_credit.created_at;
    v_result.balance := p_wallet.balance;
    v_result.held := p_wallet.held;
    RETURN v_result;
END;
$$;

-- The answer for a refused credit: its outcome, and for amount_mismatch
-- the amount expected.
CREATE OR REPLACE FUNCTION wallet.credit_refused(p_outcome TEXT, p_expected_amount BIGINT DEFAULT NULL)
RETURNS wallet.credit_result
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    v_result wallet.credit_result;
BEGIN
    v_result.outcome := p_outcome;
    IF p_outcome = 'amount_mismatch' THEN
        v_result.expected_amount := p_expected_amount;
    END IF;
    RETURN v_result;
END;
$$;

-- Posts a batch's credits (and their bonuses and other lines), writes the
-- credits and their lines, and returns the answers naming their entries
-- (wallet.credit_results_posted).
CREATE OR REPLACE FUNCTION wallet.post_credits(
    p_results wallet.credit_result[], p_op_posting INTEGER[], p_postings wallet.posting[], p_credits wallet.credits[],
    p_credit_posting INTEGER[])
RETURNS wallet.credit_result[]
LANGUAGE plpgsql AS $$
DECLARE
    v_entries wallet.entries[];
BEGIN
    IF cardinality(p_postings) = 0 THEN
        RETURN p_results;
    END IF;
    v_entries := wallet.post_entries(p_postings);
    PERFORM wallet.insert_credits(p_credits, ARRAY(SELECT v_entries[c] FROM unnest(p_credit_posting) c));
    -- The other `credit` entries are the credits' other lines.
    INSERT INTO wallet.credit_lines (flow_no, currency, amount, entry_id)
    SELECT e.reference, e.currency, e.amount, e.id
    FROM unnest(v_entries) WITH ORDINALITY e
    WHERE e.kind = 'credit' AND e.ordinality <> ALL (p_credit_posting);
    RETURN wallet.credit_results_posted(p_results, p_op_posting, v_entries);
END;
$$;

-- The answers of a posted batch, each credit's (and each replay of it)
-- naming the entry its posting wrote: `p_op_posting` gives, per answer, its
-- posting's place in `p_entries`.
CREATE OR REPLACE FUNCTION wallet.credit_results_posted(
    p_results wallet.credit_result[], p_op_posting INTEGER[], p_entries wallet.entries[])
RETURNS wallet.credit_result[]
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    v_result wallet.credit_result;
BEGIN
    FOR i IN 1 .. coalesce(cardinality(p_results), 0) LOOP
        CONTINUE WHEN p_op_posting[i] IS NULL;
        v_result := p_results[i];
        v_result.entry_id := (p_entries[p_op_posting[i]]).id;
        p_results[i] := v_result;
    END LOOP;
    RETURN p_results;
END;
$$;

-- Writes the credits a batch made, the n-th naming the n-th entry given,
-- and queues the consume of each Google Play purchase among them in the same
-- transaction: once credited, a purchase is consumed. The flowNO locks keep
-- other credits of these flowNOs out; the unique flowNO still stops a
-- writer that bypasses them (WL008: the whole batch is undone).
CREATE OR REPLACE FUNCTION wallet.insert_credits(p_credits wallet.credits[], p_entries wallet.entries[])
RETURNS VOID
LANGUAGE plpgsql AS $$
DECLARE
    v_written INTEGER;
BEGIN
    INSERT INTO wallet.credits (flow_no, user_id, product_id, quantity, currency, amount,
                                source, environment, client, entry_id, purchase_token)
    SELECT c.flow_no, c.user_id, c.product_id, c.quantity, c.currency, c.amount, c.source, c.environment,
           c.client, (p_entries[c.ordinality]).id, c.purchase_token
    FROM unnest(p_credits) WITH ORDINALITY c
    ON CONFLICT (flow_no) DO NOTHING;
    GET DIAGNOSTICS v_written = ROW_COUNT;
    IF v_written <> cardinality(p_credits) THEN
        RAISE EXCEPTION 'credit_many: a flowNO of this batch was credited concurrently' USING ERRCODE = 'WL008';
    END IF;
    INSERT INTO wallet.outbox (kind, key, flow_no, environment, window_ends_at)
    SELECT 'googleplay_consume', c.purchase_token, c.flow_no, c.environment, now() + INTERVAL '3 days'
    FROM unnest(p_credits) c
    WHERE c.purchase_token IS NOT NULL
    ON CONFLICT (kind, key) DO NOTHING;
END;
$$;

-- A credit_request of the previous release, with its purchase token.
CREATE OR REPLACE FUNCTION wallet.credit_operation_of(p_request wallet.credit_request, p_purchase_token TEXT)
RETURNS wallet.credit_operation
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    v_operation wallet.credit_operation;
BEGIN
    v_operation.client := p_request.client;
    v_operation.flow_no := p_request.flow_no;
    v_operation.user_id := p_request.user_id;
    v_operation.product_id := p_request.product_id;
    v_operation.quantity := p_request.quantity;
    v_operation.claimed_amount := p_request.claimed_amount;
    v_operation.source := p_request.source;
    v_operation.environment := p_request.environment;
    v_operation.purchase_token := p_purchase_token;
    RETURN v_operation;
END;
$$;

-- The previous release's calls, with wallet.credit_request and, beside it,
-- an array of purchase tokens (or none): its instances keep crediting while
-- the new ones start. A later migration drops them.
CREATE OR REPLACE FUNCTION wallet.credit_many(p_requests wallet.credit_request[], p_purchase_tokens TEXT[])
RETURNS SETOF wallet.credit_result
LANGUAGE sql AS $$
    SELECT * FROM wallet.credit_many(ARRAY(
        SELECT wallet.credit_operation_of(p_requests[i], p_purchase_tokens[i])
        FROM generate_subscripts(p_requests, 1) i ORDER BY i));
$$;

CREATE OR REPLACE FUNCTION wallet.credit_many(p_requests wallet.credit_request[])
RETURNS SETOF wallet.credit_result
LANGUAGE sql AS $$
    SELECT * FROM wallet.credit_many(p_requests, NULL::TEXT[]);
$$;
