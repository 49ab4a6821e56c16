-- Coins past their lot's expiry (Migrations/0027_expiring_lots.sql): they
-- stop counting as available at once, and an `expire` entry takes them
-- out of the balance, written by wallet.post_entries like any other.

-- What a wallet may lose to expiry now: its coins in lots past their
-- expiry, less what its holds need of them. A hold reserves an amount, not
-- lots, so the coins past expiry that the other lots cannot cover for the
-- holds are kept: with E such coins and F others, F + E = balance, the
-- holds keep greatest(0, held - F) of E, and the rest goes.
CREATE OR REPLACE FUNCTION wallet.expirable(p_user_id TEXT, p_currency TEXT, p_balance BIGINT, p_held BIGINT)
RETURNS BIGINT
LANGUAGE sql STABLE
RETURN least(greatest(0, p_balance - p_held),
             (SELECT coalesce(sum(l.remaining), 0) FROM wallet.lots l
              WHERE l.user_id = p_user_id AND l.currency = p_currency AND l.open
                AND l.expires_at <= now()))::BIGINT;

-- The batch's wallets (locked, their due holds expired) once their coins
-- past expiry are gone: an `expire` posting per wallet that has some to
-- lose, in the wallets' order (wallet.move_lots takes them from the lots
-- past expiry alone, soonest first).
CREATE OR REPLACE FUNCTION wallet.expire_batch_lots(p_wallets wallet.batch_wallet[])
RETURNS wallet.batch_wallet[]
LANGUAGE plpgsql AS $$
DECLARE
    v_postings wallet.posting[];
    v_wallets  wallet.batch_wallet[];
BEGIN
    SELECT array_agg(wallet.new_posting(p_kind => 'expire', p_user_id => w.user_id, p_currency => w.currency,
                                        p_amount => -x.amount, p_reference => 'expire', p_client => 'wallet')
                     ORDER BY w.user_id, w.currency)
    INTO v_postings
    FROM unnest(p_wallets) w
    JOIN wallet.wallets d ON d.user_id = w.user_id AND d.currency = w.currency AND d.next_expiry <= now()
    CROSS JOIN LATERAL (SELECT wallet.expirable(w.user_id, w.currency, w.balance, w.held) AS amount) x
    WHERE x.amount > 0;
    IF v_postings IS NULL THEN
        RETURN p_wallets;
    END IF;
    PERFORM wallet.post_entries(v_postings);
    SELECT array_agg(ROW(w.user_id, w.currency, w.balance + coalesce(x.amount, 0), FALSE, w.held)::wallet.batch_wallet
                     ORDER BY w.ordinality)
    INTO v_wallets
    FROM unnest(p_wallets) WITH ORDINALITY w
    LEFT JOIN unnest(v_postings) x ON x.user_id = w.user_id AND x.currency = w.currency;
    RETURN v_wallets;
END;
$$;

-- The sweeper's step: one wallet whose coins are past expiry (and may go:
-- not all needed by its holds), locked, its due holds and lots expired.
-- Returns the coins it expired; 0 when no wallet is due. A wallet another
-- transaction holds is left for the next step.
CREATE OR REPLACE FUNCTION wallet.expire_lots()
RETURNS BIGINT
LANGUAGE plpgsql AS $$
DECLARE
    v_user_id  TEXT;
    v_currency TEXT;
    v_before   BIGINT;
    v_after    BIGINT;
BEGIN
    SELECT w.user_id, w.currency, w.balance INTO v_user_id, v_currency, v_before
    FROM wallet.wallets w
    WHERE w.next_expiry <= now() AND wallet.expirable(w.user_id, w.currency, w.balance, w.held) > 0
    ORDER BY w.next_expiry
    LIMIT 1
    FOR UPDATE SKIP LOCKED;
    IF v_user_id IS NULL THEN
        RETURN 0;
    END IF;
    SELECT (l.wallets[1]).balance INTO v_after
    FROM wallet.lock_batch_wallets(ARRAY[ROW(v_user_id, v_currency)::wallet.wallet_key], FALSE) l;
    RETURN v_before - v_after;
END;
$$;
