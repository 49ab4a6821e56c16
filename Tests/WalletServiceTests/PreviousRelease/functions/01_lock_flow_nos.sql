-- wallet.lock_flow_nos, re-applied by the migrator whenever this file
-- changes.
--
-- Lock order, everywhere: flowNO locks (here, in key order) first, then
-- wallet rows in (user_id, currency) order, then credit rows.
--
-- Who takes flowNO locks: wallet.credit_many, for its whole batch, before it
-- reads or locks anything; wallet.apply_appstore_notification, for the
-- notification's flowNO, before it reads anything. Both decide on what the
-- other writes (a credit row; Apple's refund state), so without a common
-- lock both could commit under READ COMMITTED and a purchase would end both
-- credited and revoked. wallet.refund_credit and wallet.reverse_refund take
-- none of their own: they act only on a credit that exists, whose row lock
-- settles them, and an admin script may call them after locking a wallet.

-- Takes a transaction-scoped advisory lock per distinct flowNO, in key
-- order, so two batches that share flowNOs cannot deadlock on them. The key
-- is the flowNO's hash in a namespace of its own (the two-integer form,
-- which never meets the migrator's one-bigint lock); two flowNOs that share
-- a hash only wait for each other.
CREATE OR REPLACE FUNCTION wallet.lock_flow_nos(p_flow_nos TEXT[]) RETURNS VOID
LANGUAGE plpgsql AS $$
DECLARE
    -- 'WLFN': wallet flowNO locks.
    c_namespace CONSTANT INTEGER := x'574C464E'::INTEGER;
    v_key       INTEGER;
BEGIN
    FOR v_key IN
        SELECT DISTINCT hashtext(f) FROM unnest(p_flow_nos) AS f WHERE f IS NOT NULL ORDER BY 1
    LOOP
        PERFORM pg_advisory_xact_lock(c_namespace, v_key);
    END LOOP;
END;
$$;
