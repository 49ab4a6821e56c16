-- wallet.grant_reward, the game server's grants (POST /v1/grants),
-- re-applied by the migrator whenever this file changes (its tables and
-- outcome since 0030_bonuses_rewards_and_debt.sql).
--
-- Lock order (01_lock_flow_nos.sql): the grant's key lock (namespace
-- 'WLGK', taken by grants alone, before anything else), then its wallet's
-- row lock.

-- Grants free coins to a player under an idempotency key per API client,
-- with the rules of a debit's key: the same request again replays the
-- first answer; another request under the key is refused. The coins make
-- a `reward` lot that expires `p_expires_in_days` from now (never, when
-- NULL); a wallet in debt repays it first. The entry is a `grant` whose
-- reference is the key (event `grant.created`).
--
-- Outcomes: granted (stored under the key; `replayed` when it was already),
-- idempotency_key_reused, unknown_currency, paid_currency_not_grantable
-- (a currency only purchases make: wallet.currencies.paid). The last three
-- store nothing. The caller checks the amount against its own limit
-- (WALLET_GRANT_MAX_AMOUNT); amounts outside 1..10^12 raise WL003.
CREATE OR REPLACE FUNCTION wallet.grant_reward(
    p_client TEXT, p_key TEXT, p_request_hash BYTEA, p_request_id TEXT,
    p_user_id TEXT, p_currency TEXT, p_amount BIGINT, p_reason TEXT, p_expires_in_days INTEGER,
    p_metadata JSONB DEFAULT NULL)
RETURNS TABLE (outcome TEXT, replayed BOOLEAN, entry_id BIGINT, amount BIGINT, balance BIGINT, held BIGINT,
               created_at TIMESTAMPTZ, expires_at TIMESTAMPTZ, request_id TEXT)
LANGUAGE plpgsql AS $$
DECLARE
    -- 'WLGK': wallet grant key locks.
    c_namespace CONSTANT INTEGER := x'574C474B'::INTEGER;
    v_paid    BOOLEAN;
    v_stored  wallet.idempotency_keys;
    v_wallet  wallet.batch_wallet;
    v_entry   wallet.entries;
BEGIN
    IF p_amount IS NULL OR p_amount NOT BETWEEN 1 AND 1000000000000 THEN
        RAISE EXCEPTION 'amount must be between 1 and 10^12, got %', p_amount USING ERRCODE = 'WL003';
    END IF;
    IF p_expires_in_days NOT BETWEEN 1 AND 3650 THEN
        RAISE EXCEPTION 'expires_in_days must be between 1 and 3650, got %', p_expires_in_days USING ERRCODE = 'WL003';
    END IF;
    replayed := FALSE;
    -- Two grants under one key serialize here, whatever wallet they name.
    PERFORM pg_advisory_xact_lock(c_namespace, hashtext(p_client || E'\x1f' || p_key));
    SELECT * INTO v_stored FROM wallet.idempotency_keys k WHERE k.client = p_client AND k.key = p_key;
    IF v_stored.key IS NOT NULL THEN
        IF v_stored.outcome <> 'granted' OR v_stored.request_hash <> p_request_hash THEN
            outcome := 'idempotency_key_reused';
        ELSE
            outcome := 'granted';
            replayed := TRUE;
            entry_id := v_stored.entry_id;
            amount := v_stored.amount;
            balance := v_stored.balance;
            held := v_stored.held;
            created_at := v_stored.created_at;
            request_id := v_stored.request_id;
            SELECT l.expires_at INTO expires_at FROM wallet.lots l WHERE l.entry_id = v_stored.entry_id;
        END IF;
        RETURN NEXT;
        RETURN;
    END IF;
    SELECT c.paid INTO v_paid FROM wallet.currencies c WHERE c.code = p_currency;
    IF v_paid IS NULL THEN
        outcome := 'unknown_currency';
        RETURN NEXT;
        RETURN;
    ELSIF v_paid THEN
        outcome := 'paid_currency_not_grantable';
        RETURN NEXT;
        RETURN;
    END IF;

    v_wallet := (SELECT (l.wallets)[1]
                 FROM wallet.lock_batch_wallets(ARRAY[ROW(p_user_id, p_currency)::wallet.wallet_key], TRUE) l);
    expires_at := now() + make_interval(days => p_expires_in_days);
    v_entry := (wallet.post_entries(ARRAY[wallet.new_posting(
        p_kind => 'grant', p_user_id => p_user_id, p_currency => p_currency, p_amount => p_amount,
        p_reference => p_key, p_client => p_client,
        p_metadata => jsonb_strip_nulls(jsonb_build_object('source', 'api', 'reason', p_reason,
                                                           'metadata', p_metadata)),
        p_lot_source => 'reward', p_lot_expires_at => expires_at,
        p_data => jsonb_strip_nulls(jsonb_build_object('expires_at', wallet.rfc3339(expires_at)))
        )]))[1];
    outcome := 'granted';
    entry_id := v_entry.id;
    amount := p_amount;
    balance := v_entry.balance_after;
    held := v_wallet.held;
    created_at := v_entry.created_at;
    request_id := p_request_id;
    INSERT INTO wallet.idempotency_keys (client, key, request_hash, outcome, request_id, entry_id, amount, balance,
                                         held, created_at)
    VALUES (p_client, p_key, p_request_hash, 'granted', p_request_id, v_entry.id, p_amount, v_entry.balance_after,
            v_wallet.held, v_entry.created_at);
    RETURN NEXT;
END;
$$;
