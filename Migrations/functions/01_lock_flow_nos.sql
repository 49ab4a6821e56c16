-- wallet.lock_flow_nos and wallet.lock_purchase_tokens, re-applied by the
-- migrator whenever this file changes.
--
-- Lock order, everywhere: flowNO locks (here, in key order) first, then
-- Google Play purchase-token locks (here, in key order), then wallet rows in
-- (user_id, currency) order, then credit or hold rows. Coins are posted
-- last (wallet.post_entries), under the wallet locks its caller holds.
--
-- Who takes flowNO locks: wallet.credit_many, for its whole batch, before it
-- reads or locks anything; wallet.apply_appstore_notification, for the
-- notification's flowNO, before it reads anything. Both decide on what the
-- other writes (a credit row; Apple's refund state), so without a common
-- lock both could commit under READ COMMITTED and a purchase would end both
-- credited and revoked. wallet.refund_credit and wallet.reverse_refund take
-- none of their own: they act only on a credit that exists, whose row lock
-- settles them, and an admin script may call them after locking a wallet.
--
-- Who takes purchase-token locks: wallet.credit_many, for its batch's Google
-- Play tokens, right after its flowNO locks; wallet.apply_googleplay_voids,
-- for its token, before it reads anything (it takes no flowNO lock). A
-- Google purchase is known by its token; the flowNO it is credited under is
-- Google's orderId, which a void may name differently or not at all, so a
-- credit and a void of one purchase meet on the token: either the credit
-- commits first and the void then refunds it, or the void commits first and
-- the credit is refused as revoked.
--
-- Who takes wallet rows: a batch's, in key order, wallet.lock_batch_wallets
-- (credit_many, debit_many); one wallet, wallet.lock_credit (refunds and
-- reversals, then the credit row), wallet.adjust_balance (grants and
-- revokes), wallet.lock_hold_wallet (placing a hold) and wallet.lock_hold
-- (a capture or release, then the hold row); wallet.expire_holds, the
-- sweeper, one wallet after another in key order, then its holds. A
-- group-commit batch runs credit_many, debit_many and hold_many in turn,
-- each locking its own wallets, which no other writer routes to.

-- Takes a transaction-scoped advisory lock per distinct key, in key
-- order, so two transactions that share keys cannot deadlock on them. The
-- lock is the key's hash in `p_namespace` (the two-integer form, which never
-- meets the migrator's one-bigint lock); two keys that share a hash only
-- wait for each other. NULLs take nothing.
CREATE OR REPLACE FUNCTION wallet.lock_keys(p_namespace INTEGER, p_keys TEXT[]) RETURNS VOID
LANGUAGE plpgsql AS $$
DECLARE
    v_key INTEGER;
BEGIN
    FOR v_key IN
        SELECT DISTINCT hashtext(k) FROM unnest(p_keys) AS k WHERE k IS NOT NULL ORDER BY 1
    LOOP
        PERFORM pg_advisory_xact_lock(p_namespace, v_key);
    END LOOP;
END;
$$;

-- flowNO locks, in namespace 'WLFN'.
CREATE OR REPLACE FUNCTION wallet.lock_flow_nos(p_flow_nos TEXT[]) RETURNS VOID
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM wallet.lock_keys(x'574C464E'::INTEGER, p_flow_nos);
END;
$$;

-- Google Play purchase-token locks, in namespace 'WLPT' (the other stores'
-- requests have no token, and take nothing).
CREATE OR REPLACE FUNCTION wallet.lock_purchase_tokens(p_tokens TEXT[]) RETURNS VOID
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM wallet.lock_keys(x'574C5054'::INTEGER, p_tokens);
END;
$$;
