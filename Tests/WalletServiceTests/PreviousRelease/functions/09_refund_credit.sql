-- wallet.refund_credit, re-applied by the migrator whenever this file
-- changes (first defined in 0003_admin_and_invariants.sql; Google's
-- cumulative refunds since 0013). The admin refund script, Apple's refund
-- notifications and Google's voids all refund through it.

-- Refunds a credit: a `refund` entry for what is left of it (or the given
-- part), the balance possibly below zero. An Apple or admin refund makes
-- the credit `refunded`; a Google one makes it `refunded` once everything
-- is refunded and `partially_refunded` before that. refunded_amount is
-- cumulative.
--
-- Outcomes: refunded, already_refunded (nothing changes). An unknown flowNO
-- raises WL002. `p_source` is 'admin' (audited here), 'apple' or 'google'
-- (recorded by the notification or sweep that caused it).
CREATE OR REPLACE FUNCTION wallet.refund_credit(
    p_flow_no TEXT, p_reason TEXT, p_operator TEXT,
    p_amount BIGINT DEFAULT NULL, p_source TEXT DEFAULT 'admin', p_client TEXT DEFAULT 'admin')
RETURNS TABLE (outcome TEXT, entry_id BIGINT, amount BIGINT, balance BIGINT, user_id TEXT, currency TEXT)
LANGUAGE plpgsql AS $$
DECLARE
    v_locked   RECORD;
    v_credit   wallet.credits;
    v_balance  BIGINT;
    v_amount   BIGINT;
    v_left     BIGINT;
    v_refunded BIGINT;
    v_entry    BIGINT;
BEGIN
    IF p_source NOT IN ('admin', 'apple', 'google') THEN
        RAISE EXCEPTION 'refund source must be admin, apple or google' USING ERRCODE = 'WL003';
    END IF;
    IF p_source = 'admin' THEN
        PERFORM wallet.require_text('operator', p_operator);
        PERFORM wallet.require_text('reason', p_reason);
    END IF;
    SELECT * INTO v_locked FROM wallet.lock_credit(p_flow_no);
    v_credit := v_locked.credit;
    v_balance := v_locked.balance;

    user_id := v_credit.user_id;
    currency := v_credit.currency;
    IF v_credit.status = 'refunded' THEN
        outcome := 'already_refunded';
        amount := 0;
        balance := v_balance;
    ELSE
        v_left := v_credit.amount - coalesce(v_credit.refunded_amount, 0);
        v_amount := coalesce(p_amount, v_left);
        IF v_amount NOT BETWEEN 1 AND v_left THEN
            RAISE EXCEPTION 'refund amount % is outside 1..%', v_amount, v_left USING ERRCODE = 'WL003';
        END IF;
        v_refunded := coalesce(v_credit.refunded_amount, 0) + v_amount;
        v_entry := nextval('wallet.entries_id_seq');
        v_balance := v_balance - v_amount;
        UPDATE wallet.wallets w SET balance = v_balance, updated_at = now()
        WHERE w.user_id = v_credit.user_id AND w.currency = v_credit.currency;
        INSERT INTO wallet.entries (id, user_id, currency, amount, balance_after, kind, reference, client, metadata)
        VALUES (v_entry, v_credit.user_id, v_credit.currency, -v_amount, v_balance, 'refund', p_flow_no, p_client,
                jsonb_strip_nulls(jsonb_build_object('source', p_source, 'operator', p_operator, 'reason', p_reason)));
        UPDATE wallet.credits c
        SET status = CASE WHEN p_source = 'google' AND v_refunded < c.amount THEN 'partially_refunded' ELSE 'refunded' END,
            refunded_by = p_source, refunded_amount = v_refunded, updated_at = now()
        WHERE c.flow_no = p_flow_no;
        outcome := 'refunded';
        entry_id := v_entry;
        amount := v_amount;
        balance := v_balance;
    END IF;

    IF p_source = 'admin' THEN
        INSERT INTO wallet.admin_audit (action, operator, reason, arguments, outcome, entry_ids)
        VALUES ('refund', p_operator, p_reason,
                jsonb_build_object('flow_no', p_flow_no, 'amount', p_amount), outcome,
                CASE WHEN v_entry IS NULL THEN '{}'::BIGINT[] ELSE ARRAY[v_entry] END);
    END IF;
    RETURN NEXT;
END;
$$;
