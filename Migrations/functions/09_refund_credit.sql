-- wallet.refund_credit, wallet.reverse_refund and wallet.lock_credit,
-- re-applied by the migrator whenever this file changes (first defined in
-- 0003_admin_and_invariants.sql; Google's cumulative refunds since 0013;
-- posted through wallet.post_entries since 0017; shortfalls since 0030).
-- The admin refund script,
-- Apple's refund notifications and Google's voids all refund through
-- refund_credit; Apple's REFUND_REVERSED reverses through reverse_refund.
--
-- Lock order (01_lock_flow_nos.sql): these take no flowNO or token lock of
-- their own (they act only on a credit that exists, whose row lock settles
-- them, and their callers take those locks first when they need them);
-- wallet.lock_credit takes the credit's wallet row, then the credit row.

-- Locks a credit for a refund or its reversal: its wallet first, then the
-- credit row. Returns both as they are once locked. An unknown flowNO
-- raises WL002, naming it.
CREATE OR REPLACE FUNCTION wallet.lock_credit(p_flow_no TEXT, OUT credit wallet.credits, OUT balance BIGINT)
LANGUAGE plpgsql AS $$
BEGIN
    -- Its wallet never changes, so it is read before the wallet's lock.
    SELECT * INTO credit FROM wallet.credits c WHERE c.flow_no = p_flow_no;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no credit for flowNO %', p_flow_no USING ERRCODE = 'WL002';
    END IF;
    SELECT w.balance INTO balance FROM wallet.wallets w
    WHERE w.user_id = credit.user_id AND w.currency = credit.currency
    FOR UPDATE;
    SELECT * INTO credit FROM wallet.credits c WHERE c.flow_no = p_flow_no FOR UPDATE;
END;
$$;

-- Refunds a credit: a `refund` entry for what is left of it (or the given
-- part). An Apple or admin refund makes the credit `refunded`; a Google one
-- makes it `refunded` once everything is refunded and `partially_refunded`
-- before that. refunded_amount is cumulative: what the store (or admin)
-- refunded.
--
-- The entry takes the coins back from the credit's own purchase lot first,
-- then from the wallet's other lots in spending order (wallet.move_lots).
-- When the wallet holds fewer coins than that, lot_settings.refund_debt
-- (WALLET_REFUND_DEBT) decides: `allow` takes it all and the balance goes
-- below zero, a debt the next increases repay; `floor` takes what the
-- wallet holds (the entry may take nothing) and records the rest in
-- wallet.refund_shortfalls.
--
-- Outcomes: refunded, already_refunded (nothing changes). An unknown flowNO
-- raises WL002. `p_source` is 'admin' (audited here), 'apple' or 'google'
-- (recorded by the notification or sweep that caused it). `amount` is what
-- was refunded, `shortfall` the part of it no coins were taken for.
CREATE OR REPLACE FUNCTION wallet.refund_credit(
    p_flow_no TEXT, p_reason TEXT, p_operator TEXT,
    p_amount BIGINT DEFAULT NULL, p_source TEXT DEFAULT 'admin', p_client TEXT DEFAULT 'admin')
RETURNS TABLE (outcome TEXT, entry_id BIGINT, amount BIGINT, balance BIGINT, user_id TEXT, currency TEXT,
               shortfall BIGINT)
LANGUAGE plpgsql AS $$
DECLARE
    v_locked   RECORD;
    v_credit   wallet.credits;
    v_left     BIGINT;
    v_amount   BIGINT;
    v_taken    BIGINT;
    v_entry    wallet.entries;
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

    user_id := v_credit.user_id;
    currency := v_credit.currency;
    shortfall := 0;
    IF v_credit.status = 'refunded' THEN
        outcome := 'already_refunded';
        amount := 0;
        balance := v_locked.balance;
    ELSE
        v_left := v_credit.amount - coalesce(v_credit.refunded_amount, 0);
        v_amount := coalesce(p_amount, v_left);
        IF v_amount NOT BETWEEN 1 AND v_left THEN
            RAISE EXCEPTION 'refund amount % is outside 1..%', v_amount, v_left USING ERRCODE = 'WL003';
        END IF;
        v_taken := CASE WHEN (SELECT s.refund_debt FROM wallet.lot_settings s WHERE s.only_row) = 'floor'
                        THEN least(v_amount, greatest(0, v_locked.balance)) ELSE v_amount END;
        shortfall := v_amount - v_taken;
        v_entry := (wallet.post_entries(ARRAY[wallet.new_posting(
            p_kind => 'refund', p_user_id => v_credit.user_id, p_currency => v_credit.currency, p_amount => -v_taken,
            p_reference => p_flow_no, p_client => p_client,
            p_metadata => jsonb_strip_nulls(jsonb_build_object('source', p_source, 'operator', p_operator,
                                                               'reason', p_reason)),
            p_data => jsonb_build_object(
                'refunded_amount', coalesce(v_credit.refunded_amount, 0) + v_amount,
                'partial', coalesce(v_credit.refunded_amount, 0) + v_amount < v_credit.amount,
                'credit_amount', v_credit.amount, 'product_id', v_credit.product_id)
                || CASE WHEN shortfall > 0 THEN jsonb_build_object('shortfall', shortfall) ELSE '{}' END)]))[1];
        IF shortfall > 0 THEN
            INSERT INTO wallet.refund_shortfalls (entry_id, flow_no, user_id, currency, amount)
            VALUES (v_entry.id, p_flow_no, v_credit.user_id, v_credit.currency, shortfall);
        END IF;
        UPDATE wallet.credits c
        SET status = CASE WHEN p_source = 'google' AND coalesce(c.refunded_amount, 0) + v_amount < c.amount
                          THEN 'partially_refunded' ELSE 'refunded' END,
            refunded_by = p_source, refunded_amount = coalesce(c.refunded_amount, 0) + v_amount, updated_at = now()
        WHERE c.flow_no = p_flow_no;
        outcome := 'refunded';
        entry_id := v_entry.id;
        amount := v_amount;
        balance := v_entry.balance_after;
    END IF;

    IF p_source = 'admin' THEN
        INSERT INTO wallet.admin_audit (action, operator, reason, arguments, outcome, entry_ids)
        VALUES ('refund', p_operator, p_reason,
                jsonb_build_object('flow_no', p_flow_no, 'amount', p_amount), outcome,
                CASE WHEN v_entry.id IS NULL THEN '{}'::BIGINT[] ELSE ARRAY[v_entry.id] END);
    END IF;
    RETURN NEXT;
END;
$$;

-- Undoes Apple's refund of a credit once (REFUND_REVERSED): a
-- `refund_reversal` entry that gives back what the refund's entries took
-- (the refunded amount, less any shortfall), to the lots they took it
-- from, and the credit is `credited` again. Only a refund that came from
-- Apple is reversed this way.
--
-- Outcomes: reversed, not_refunded, not_reversible (an admin refund).
-- An unknown flowNO raises WL002.
CREATE OR REPLACE FUNCTION wallet.reverse_refund(p_flow_no TEXT, p_client TEXT DEFAULT 'appstore')
RETURNS TABLE (outcome TEXT, entry_id BIGINT, amount BIGINT, balance BIGINT, user_id TEXT, currency TEXT)
LANGUAGE plpgsql AS $$
DECLARE
    v_locked RECORD;
    v_credit wallet.credits;
    v_entry  wallet.entries;
    v_took   BIGINT;
BEGIN
    SELECT * INTO v_locked FROM wallet.lock_credit(p_flow_no);
    v_credit := v_locked.credit;

    user_id := v_credit.user_id;
    currency := v_credit.currency;
    amount := 0;
    balance := v_locked.balance;
    IF v_credit.status <> 'refunded' THEN
        outcome := 'not_refunded';
    ELSIF v_credit.refunded_by <> 'apple' THEN
        outcome := 'not_reversible';
    ELSE
        SELECT coalesce(-sum(e.amount), 0) INTO v_took
        FROM wallet.entries e
        WHERE e.reference = p_flow_no AND e.kind = 'refund'
          AND e.id > coalesce((SELECT max(x.id) FROM wallet.entries x
                               WHERE x.reference = p_flow_no AND x.kind = 'refund_reversal'), 0);
        v_entry := (wallet.post_entries(ARRAY[wallet.new_posting(
            p_kind => 'refund_reversal', p_user_id => v_credit.user_id, p_currency => v_credit.currency,
            p_amount => v_took, p_reference => p_flow_no, p_client => p_client,
            p_metadata => jsonb_build_object('source', 'apple'),
            p_data => jsonb_build_object('reversed_amount', v_credit.refunded_amount,
                                         'credit_amount', v_credit.amount, 'product_id', v_credit.product_id)
                || CASE WHEN v_took < v_credit.refunded_amount
                        THEN jsonb_build_object('returned', v_took) ELSE '{}' END)]))[1];
        UPDATE wallet.credits c SET status = 'credited', refunded_by = NULL, refunded_amount = NULL, updated_at = now()
        WHERE c.flow_no = p_flow_no;
        outcome := 'reversed';
        entry_id := v_entry.id;
        amount := v_took;
        balance := v_entry.balance_after;
    END IF;
    RETURN NEXT;
END;
$$;

-- What a refund does when the wallet holds less than it takes back
-- (WALLET_REFUND_DEBT: `allow` or `floor`), as the service runs, written
-- at its start-up so that the admin scripts refund alike.
CREATE OR REPLACE FUNCTION wallet.set_refund_debt(p_mode TEXT) RETURNS VOID
LANGUAGE sql AS $$
    UPDATE wallet.lot_settings SET refund_debt = p_mode WHERE refund_debt IS DISTINCT FROM p_mode
$$;
