-- Account tokens, re-applied by the migrator whenever this file changes (the
-- tables are in 0022_account_tokens.sql).

-- Google Play's obfuscatedExternalAccountId for a user: the hex SHA-256 of
-- its UTF-8 bytes (GooglePlay's PurchasePolicy.accountID computes the same).
CREATE OR REPLACE FUNCTION wallet.google_account_id(p_user_id TEXT) RETURNS TEXT
LANGUAGE sql IMMUTABLE AS $$
    SELECT encode(sha256(convert_to(p_user_id, 'UTF8')), 'hex')
$$;

-- The App Store's appAccountToken for a user: UUIDv5 under the namespace
-- the service runs with (AppStore's NameBasedUUID computes the same), or
-- NULL with no namespace or without uuid-ossp. The extension is looked up
-- wherever it was installed.
CREATE OR REPLACE FUNCTION wallet.apple_account_token(p_user_id TEXT) RETURNS TEXT
LANGUAGE plpgsql STABLE AS $$
DECLARE
    v_namespace UUID;
    v_schema    TEXT;
    v_token     TEXT;
BEGIN
    -- By its primary key: a wallet made by credit_many runs this under that
    -- function's enable_seqscan = off, where a sequential scan of the one
    -- row is costed at 10^10 and JIT-compiled on every new wallet (a
    -- 20-credit batch of new players took 0.46 to 0.78 s, 21 to 57 ms now).
    SELECT s.apple_namespace INTO v_namespace FROM wallet.account_token_settings s WHERE s.only_row;
    SELECT n.nspname INTO v_schema
    FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace
    WHERE e.extname = 'uuid-ossp';
    IF v_namespace IS NULL OR v_schema IS NULL THEN
        RETURN NULL;
    END IF;
    EXECUTE format('SELECT %I.uuid_generate_v5($1, $2)::text', v_schema) INTO v_token USING v_namespace, p_user_id;
    RETURN v_token;
END;
$$;

-- Records that the tokens name `p_user_id` (a NULL one is skipped) and
-- returns, for each, the player it names: `p_user_id`, or the one it was
-- recorded for before. Idempotent.
CREATE OR REPLACE FUNCTION wallet.record_account_tokens(p_user_id TEXT, p_apple TEXT, p_google TEXT)
RETURNS TABLE (store TEXT, user_id TEXT)
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO wallet.account_tokens AS a (store, token, user_id)
    SELECT t.store, t.token, p_user_id
    FROM (VALUES ('apple', lower(p_apple)), ('google', lower(p_google))) t (store, token)
    WHERE t.token IS NOT NULL
    ON CONFLICT DO NOTHING;
    RETURN QUERY
    SELECT a.store::TEXT, a.user_id::TEXT FROM wallet.account_tokens a
    WHERE (a.store = 'apple' AND a.token = lower(p_apple)) OR (a.store = 'google' AND a.token = lower(p_google))
    ORDER BY a.store;
END;
$$;

-- A wallet made, by the service or an admin script, records its player's
-- tokens (once per player: a second currency's wallet finds them there).
CREATE OR REPLACE FUNCTION wallet.wallet_account_tokens() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM wallet.record_account_tokens(NEW.user_id, wallet.apple_account_token(NEW.user_id),
                                         wallet.google_account_id(NEW.user_id));
    RETURN NULL;
END;
$$;
CREATE OR REPLACE TRIGGER wallets_account_tokens AFTER INSERT ON wallet.wallets
    FOR EACH ROW EXECUTE FUNCTION wallet.wallet_account_tokens();

-- The namespace the service runs with, written at start-up.
CREATE OR REPLACE FUNCTION wallet.set_account_token_namespace(p_namespace UUID) RETURNS VOID
LANGUAGE sql AS $$
    UPDATE wallet.account_token_settings SET apple_namespace = p_namespace
    WHERE apple_namespace IS DISTINCT FROM p_namespace
$$;

-- The player an account token names, or NULL.
CREATE OR REPLACE FUNCTION wallet.account_token_owner(p_store TEXT, p_token TEXT) RETURNS TEXT
LANGUAGE sql STABLE AS $$
    SELECT a.user_id::TEXT FROM wallet.account_tokens a WHERE a.store = p_store AND a.token = lower(p_token)
$$;

-- Keeps a verified purchase that names no known player, once per flowNO
-- (a Google one with its purchase token); nothing for a flowNO, or a
-- token, already credited. Returns whether it is kept now.
CREATE OR REPLACE FUNCTION wallet.keep_unclaimed_purchase(
    p_store TEXT, p_flow_no TEXT, p_product_id TEXT, p_quantity INTEGER, p_environment TEXT, p_account_token TEXT,
    p_purchase_token TEXT)
RETURNS BOOLEAN
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM wallet.lock_flow_nos(ARRAY[p_flow_no]);
    IF EXISTS (SELECT 1 FROM wallet.credits c
               WHERE c.flow_no = p_flow_no OR (p_purchase_token IS NOT NULL AND c.purchase_token = p_purchase_token)) THEN
        RETURN FALSE;
    END IF;
    INSERT INTO wallet.unclaimed_purchases (flow_no, store, product_id, quantity, environment, account_token, purchase_token)
    VALUES (p_flow_no, p_store, p_product_id, p_quantity, p_environment, lower(p_account_token), p_purchase_token)
    ON CONFLICT (flow_no) DO NOTHING;
    RETURN FOUND;
END;
$$;

-- A credit, by any path, takes its purchase out of the unclaimed ones.
CREATE OR REPLACE FUNCTION wallet.credit_claims_purchase() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM wallet.unclaimed_purchases u WHERE u.flow_no = NEW.flow_no;
    RETURN NULL;
END;
$$;
CREATE OR REPLACE TRIGGER credits_claim_purchase AFTER INSERT ON wallet.credits
    FOR EACH ROW EXECUTE FUNCTION wallet.credit_claims_purchase();

-- Credits an unclaimed purchase to `p_user_id` after a support check
-- (Scripts/admin/claim.sql), through wallet.credit_many like every credit,
-- and audits it. Refuses, changing nothing: a flowNO with no unclaimed
-- purchase and no credit (WL002), a purchase whose account token is not
-- `p_user_id`'s (WL010: the token names another player, as recorded or as
-- computed for this one), and one the credit refuses (WL011: revoked since,
-- or its product off the catalog). A flowNO credited already answers
-- `already_credited` with that credit.
CREATE OR REPLACE FUNCTION wallet.claim_purchase(p_flow_no TEXT, p_user_id TEXT, p_reason TEXT, p_operator TEXT)
RETURNS TABLE (outcome TEXT, user_id TEXT, amount BIGINT, currency TEXT, entry_id BIGINT, balance BIGINT)
LANGUAGE plpgsql AS $$
DECLARE
    v_purchase  wallet.unclaimed_purchases;
    v_owner     TEXT;
    v_expected  TEXT;
    v_operation wallet.credit_operation;
    v_result    wallet.credit_result;
BEGIN
    PERFORM wallet.require_text('flow_no', p_flow_no);
    PERFORM wallet.require_text('user_id', p_user_id);
    PERFORM wallet.require_text('reason', p_reason);
    PERFORM wallet.require_text('operator', p_operator);
    PERFORM wallet.lock_flow_nos(ARRAY[p_flow_no]);
    SELECT * INTO v_purchase FROM wallet.unclaimed_purchases u WHERE u.flow_no = p_flow_no;
    IF NOT FOUND THEN
        RETURN QUERY
        SELECT 'already_credited'::TEXT, c.user_id::TEXT, c.amount, c.currency::TEXT, c.entry_id, w.balance
        FROM wallet.credits c JOIN wallet.wallets w ON w.user_id = c.user_id AND w.currency = c.currency
        WHERE c.flow_no = p_flow_no;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'no unclaimed purchase and no credit for flowNO %', p_flow_no USING ERRCODE = 'WL002';
        END IF;
        INSERT INTO wallet.admin_audit (action, operator, reason, arguments, outcome)
        VALUES ('claim', p_operator, p_reason, jsonb_build_object('flow_no', p_flow_no, 'user_id', p_user_id),
                'already_credited');
        RETURN;
    END IF;
    IF v_purchase.account_token IS NOT NULL THEN
        v_owner := wallet.account_token_owner(v_purchase.store, v_purchase.account_token);
        v_expected := CASE v_purchase.store WHEN 'apple' THEN wallet.apple_account_token(p_user_id)
                                            ELSE wallet.google_account_id(p_user_id) END;
        IF v_owner IS DISTINCT FROM p_user_id AND (v_owner IS NOT NULL OR v_expected IS DISTINCT FROM v_purchase.account_token) THEN
            RAISE EXCEPTION 'the purchase of flowNO % carries another player''s account token (%)', p_flow_no,
                coalesce('recorded for ' || v_owner, 'not ' || p_user_id || '''s') USING ERRCODE = 'WL010';
        END IF;
    END IF;
    v_operation.client := 'admin:' || p_operator;
    v_operation.flow_no := p_flow_no;
    v_operation.user_id := p_user_id;
    v_operation.product_id := v_purchase.product_id;
    v_operation.quantity := v_purchase.quantity;
    v_operation.source := CASE v_purchase.store WHEN 'google' THEN 'googleplay' ELSE 'appstore-notification' END;
    v_operation.environment := v_purchase.environment;
    v_operation.purchase_token := v_purchase.purchase_token;
    SELECT * INTO v_result FROM wallet.credit_many(ARRAY[v_operation]);
    IF v_result.outcome <> 'credited' THEN
        RAISE EXCEPTION 'flowNO % cannot be credited: %', p_flow_no, v_result.outcome USING ERRCODE = 'WL011';
    END IF;
    INSERT INTO wallet.admin_audit (action, operator, reason, arguments, outcome, entry_ids)
    VALUES ('claim', p_operator, p_reason,
            jsonb_build_object('flow_no', p_flow_no, 'user_id', p_user_id, 'product_id', v_purchase.product_id,
                               'quantity', v_purchase.quantity),
            v_result.outcome, ARRAY[v_result.entry_id]);
    RETURN QUERY SELECT v_result.outcome, p_user_id, v_result.amount, v_result.currency, v_result.entry_id,
                        v_result.balance;
END;
$$;

-- Deletes up to `p_limit` of the unclaimed purchases received before
-- `p_before` (WALLET_UNCLAIMED_RETENTION_DAYS), oldest first; returns how
-- many.
CREATE OR REPLACE FUNCTION wallet.purge_unclaimed_purchases(p_before TIMESTAMPTZ, p_limit INTEGER) RETURNS INTEGER
LANGUAGE sql AS $$
    WITH gone AS (
        DELETE FROM wallet.unclaimed_purchases u
        WHERE u.flow_no IN (SELECT o.flow_no FROM wallet.unclaimed_purchases o WHERE o.received_at < p_before
                            ORDER BY o.received_at LIMIT p_limit)
        RETURNING 1)
    SELECT count(*)::INTEGER FROM gone
$$;
