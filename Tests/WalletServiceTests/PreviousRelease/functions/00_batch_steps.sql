-- The steps wallet.credit_many and wallet.debit_many share, re-applied by
-- the migrator whenever this file changes. Written once here so both lock,
-- write back and append the same way.
--
-- Lock order, everywhere: flowNO locks (wallet.lock_flow_nos) first, then
-- wallet rows in (user_id, currency) order, then credit rows.
--
-- They are PL/pgSQL rather than SQL functions on purpose: PostgreSQL 15
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
BEGIN
    IF p_create THEN
        INSERT INTO wallet.wallets (user_id, currency)
        SELECT DISTINCT k.user_id, k.currency FROM unnest(p_keys) k
        WHERE k.user_id IS NOT NULL
        ORDER BY 1, 2
        ON CONFLICT DO NOTHING;
    END IF;
    WITH locked AS (
        SELECT w.user_id, w.currency, w.balance, w.held FROM wallet.wallets w
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
            LEFT JOIN numbered n ON n.user_id = k.user_id AND n.currency = k.currency)
    INTO wallets, op_wallet;
    -- Holds past their time stop counting now, under the wallet's lock.
    IF EXISTS (SELECT 1 FROM unnest(wallets) w WHERE w.held > 0) THEN
        SELECT coalesce(array_agg(ROW(w.user_id, w.currency, w.balance, FALSE,
                                      CASE WHEN w.held > 0 THEN wallet.expire_due_holds(w.user_id, w.currency)
                                           ELSE 0 END)::wallet.batch_wallet ORDER BY w.ordinality), '{}')
        INTO wallets
        FROM unnest(wallets) WITH ORDINALITY w;
    END IF;
END;
$$;

-- Writes what a batch decided: checks that it took every flowNO or key it
-- meant to (`p_taken` rows written of `p_expected`; fewer means another
-- transaction committed one first, and the whole batch is undone with
-- WL008), writes back the balances it changed and appends its ledger
-- entries in id order (ids were drawn while each entry's wallet was
-- locked, so they follow the wallet's order).
CREATE OR REPLACE FUNCTION wallet.finish_batch(p_function TEXT, p_taken INTEGER, p_expected INTEGER,
                                               p_wallets wallet.batch_wallet[], p_entries wallet.entries[])
RETURNS VOID
LANGUAGE plpgsql AS $$
BEGIN
    IF p_taken <> p_expected THEN
        RAISE EXCEPTION '%: a flowNO or key of this batch was taken concurrently', p_function USING ERRCODE = 'WL008';
    END IF;
    UPDATE wallet.wallets w SET balance = b.balance, updated_at = now()
    FROM unnest(p_wallets) b
    WHERE b.changed AND w.user_id = b.user_id AND w.currency = b.currency;
    INSERT INTO wallet.entries (id, user_id, currency, amount, balance_after, kind, reference, client, metadata)
    SELECT e.id, e.user_id, e.currency, e.amount, e.balance_after, e.kind, e.reference, e.client, e.metadata
    FROM unnest(p_entries) e
    ORDER BY e.id;
END;
$$;
