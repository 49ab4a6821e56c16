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
    SELECT s.apple_namespace INTO v_namespace FROM wallet.account_token_settings s;
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

-- Keeps a verified purchase that names no known player, once per flowNO;
-- nothing for a flowNO already credited. Returns whether it is kept now.
CREATE OR REPLACE FUNCTION wallet.keep_unclaimed_purchase(
    p_store TEXT, p_flow_no TEXT, p_product_id TEXT, p_quantity INTEGER, p_environment TEXT, p_account_token TEXT)
RETURNS BOOLEAN
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM wallet.lock_flow_nos(ARRAY[p_flow_no]);
    IF EXISTS (SELECT 1 FROM wallet.credits c WHERE c.flow_no = p_flow_no) THEN
        RETURN FALSE;
    END IF;
    INSERT INTO wallet.unclaimed_purchases (flow_no, store, product_id, quantity, environment, account_token)
    VALUES (p_flow_no, p_store, p_product_id, p_quantity, p_environment, lower(p_account_token))
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
