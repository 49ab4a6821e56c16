-- The step wallet.credit_many and wallet.debit_many share before they
-- decide, re-applied by the migrator whenever this file changes: locking
-- the batch's wallets. What they decide, they post through
-- wallet.post_entries (11_post_entries.sql).
--
-- Lock order, everywhere: flowNO locks (wallet.lock_flow_nos) first, then
-- purchase-token locks (wallet.lock_purchase_tokens), then wallet rows in
-- (user_id, currency) order (here), then credit or hold rows.
--
-- It is PL/pgSQL rather than a SQL function on purpose: PostgreSQL 15
-- plans the statements of a SQL function on every call, and caches those of
-- a PL/pgSQL function per connection.

-- Locks the wallets the batch's operations touch, in key order, and returns
-- them numbered in that order, with, for each operation in turn, the number
-- of its wallet (NULL when the wallet does not exist, or the operation
-- touches none). With `p_create`, missing wallets are made first, in key
-- order: a credit makes its wallet on first use; a debit never does.
CREATE OR REPLACE FUNCTION wallet.lock_batch_wallets(
    p_keys wallet.wallet_key[], p_create BOOLEAN,
    OUT wallets wallet.batch_wallet[], OUT op_wallet INTEGER[])
LANGUAGE plpgsql AS $$
DECLARE
    v_lots_due BOOLEAN;
BEGIN
    IF p_create THEN
        INSERT INTO wallet.wallets (user_id, currency)
        SELECT DISTINCT k.user_id, k.currency FROM unnest(p_keys) k
        WHERE k.user_id IS NOT NULL
        ORDER BY 1, 2
        ON CONFLICT DO NOTHING;
    END IF;
    WITH locked AS (
        SELECT w.user_id, w.currency, w.balance, w.held, w.next_expiry FROM wallet.wallets w
        WHERE (w.user_id, w.currency) IN (SELECT k.user_id, k.currency FROM unnest(p_keys) k)
        ORDER BY w.user_id, w.currency
        FOR UPDATE
    ), numbered AS (
        SELECT l.*, row_number() OVER (ORDER BY l.user_id, l.currency)::INTEGER AS number FROM locked l
    )
    SELECT (SELECT coalesce(array_agg(ROW(n.user_id, n.currency, n.balance, FALSE, n.held)::wallet.batch_wallet
                                      ORDER BY n.number), '{}')
            FROM numbered n),
           (SELECT array_agg(n.number ORDER BY k.ordinality)
            FROM unnest(p_keys) WITH ORDINALITY k
            LEFT JOIN numbered n ON n.user_id = k.user_id AND n.currency = k.currency),
           (SELECT coalesce(bool_or(n.next_expiry <= now()), FALSE) FROM numbered n)
    INTO wallets, op_wallet, v_lots_due;
    -- Holds past their time stop counting now, under the wallets' locks (hold
    -- rows come after wallet rows in the lock order). A wallet that holds
    -- nothing has none to expire.
    IF EXISTS (SELECT 1 FROM unnest(wallets) w WHERE w.held > 0) THEN
        wallets := wallet.expire_batch_holds(wallets);
    END IF;
    -- Then coins past their lot's expiry go (Migrations/functions/18_lot_expiry.sql),
    -- once holds that no longer need them have let them go. A wallet with
    -- no lot past expiry has none to lose.
    IF v_lots_due THEN
        wallets := wallet.expire_batch_lots(wallets);
    END IF;
END;
$$;

-- The batch's wallets (locked) once their holds past expires_at are
-- expired: the holds marked in one statement for the whole batch, and a
-- hold.expired posting each (wallet.post_entries moves the held coins and
-- tells the event), in the wallets' order, then each hold's.
CREATE OR REPLACE FUNCTION wallet.expire_batch_holds(p_wallets wallet.batch_wallet[])
RETURNS wallet.batch_wallet[]
LANGUAGE plpgsql AS $$
DECLARE
    v_postings wallet.posting[];
    v_wallets  wallet.batch_wallet[];
BEGIN
    WITH expired AS (
        UPDATE wallet.holds h SET status = 'expired', expired_at = now()
        FROM unnest(p_wallets) w
        WHERE w.held > 0 AND h.user_id = w.user_id AND h.currency = w.currency AND h.status = 'held'
          AND h.expires_at <= now()
        RETURNING h AS hold
    )
    SELECT array_agg(wallet.hold_posting('hold.expired', e.hold, -(e.hold).amount)
                     ORDER BY (e.hold).user_id, (e.hold).currency, (e.hold).id)
    INTO v_postings
    FROM expired e;
    IF v_postings IS NULL THEN
        RETURN p_wallets;
    END IF;
    PERFORM wallet.post_entries(v_postings);
    SELECT array_agg(ROW(w.user_id, w.currency, w.balance, FALSE, w.held - coalesce(x.held, 0))::wallet.batch_wallet
                     ORDER BY w.ordinality)
    INTO v_wallets
    FROM unnest(p_wallets) WITH ORDINALITY w
    LEFT JOIN (SELECT q.user_id, q.currency, -sum(q.held)::BIGINT AS held FROM unnest(v_postings) q GROUP BY 1, 2) x
           ON x.user_id = w.user_id AND x.currency = w.currency;
    RETURN v_wallets;
END;
$$;
