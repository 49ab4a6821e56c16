-- wallet.refund_credit, wallet.reverse_refund and wallet.lock_credit,
-- re-applied by the migrator whenever this file changes (first defined in
-- 0003_admin_and_invariants.sql; Google's cumulative refunds since 0013;
-- posted through wallet.post_entries since 0017; shortfalls since 0030; a
-- product's other lines since 0032).
-- The admin refund script,
-- Apple's refund notifications and Google's voids all refund through
-- refund_credit; Apple's REFUND_REVERSED reverses through reverse_refund.
--
-- Lock order (01_lock_flow_nos.sql): these take no flowNO or token lock of
-- their own (they act only on a credit that exists, whose row lock settles
-- them, and their callers take those locks first when they need them);
-- wallet.lock_credit takes the credit's wallet rows (its own currency's and
-- its other lines', in currency order), then the credit row, which guards
-- its lines' rows.

-- Locks a credit for a refund or its reversal: its wallets first, then the
-- credit row. Returns the credit and its own wallet's balance as they are
-- once locked. An unknown flowNO raises WL002, naming it.
CREATE OR REPLACE FUNCTION wallet.lock_credit(p_flow_no TEXT, OUT credit wallet.credits, OUT balance BIGINT)
LANGUAGE plpgsql AS $$
BEGIN
    -- Its wallets never change, so they are read before their locks.
    SELECT * INTO credit FROM wallet.credits c WHERE c.flow_no = p_flow_no;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no credit for flowNO %', p_flow_no USING ERRCODE = 'WL002';
    END IF;
    PERFORM FROM wallet.wallets w
    WHERE w.user_id = credit.user_id
      AND (w.currency = credit.currency
           OR w.currency IN (SELECT l.currency FROM wallet.credit_lines l WHERE l.flow_no = p_flow_no))
    ORDER BY w.currency
    FOR UPDATE;
    SELECT w.balance INTO balance FROM wallet.wallets w WHERE w.user_id = credit.user_id AND w.currency = credit.currency;
    SELECT * INTO credit FROM wallet.credits c WHERE c.flow_no = p_flow_no FOR UPDATE;
END;
$$;

-- A refund's part of one currency: a `refund` entry taking back `p_amount`
-- (or, under lot_settings.refund_debt `floor`, what the wallet's
-- `p_balance` covers of it, the rest a shortfall), with `p_data` for its
-- event. Returns the entry.
CREATE OR REPLACE FUNCTION wallet.post_refund(
    p_credit wallet.credits, p_currency TEXT, p_amount BIGINT, p_balance BIGINT, p_client TEXT, p_metadata JSONB,
    p_data JSONB)
RETURNS wallet.entries
LANGUAGE plpgsql AS $$
DECLARE
    v_taken    BIGINT := CASE WHEN (SELECT s.refund_debt FROM wallet.lot_settings s WHERE s.only_row) = 'floor'
                              THEN least(p_amount, greatest(0, p_balance)) ELSE p_amount END;
    v_entry    wallet.entries;
BEGIN
    v_entry := (wallet.post_entries(ARRAY[wallet.new_posting(
        p_kind => 'refund', p_user_id => p_credit.user_id, p_currency => p_currency, p_amount => -v_taken,
        p_reference => p_credit.flow_no, p_client => p_client, p_metadata => p_metadata,
        p_data => p_data || CASE WHEN v_taken < p_amount THEN jsonb_build_object('shortfall', p_amount - v_taken)
                                 ELSE '{}' END)]))[1];
    IF v_taken < p_amount THEN
        INSERT INTO wallet.refund_shortfalls (entry_id, flow_no, user_id, currency, amount)
        VALUES (v_entry.id, p_credit.flow_no, p_credit.user_id, p_currency, p_amount - v_taken);
    END IF;
    RETURN v_entry;
END;
$$;

-- A refund's parts of the credit's other lines: each line refunded to the
-- same share of it as `p_refunded` (the credit's refunded_amount after
-- this refund) is of the credit, rounded down; all of it once the credit
-- is all refunded. Returns their entries' ids.
CREATE OR REPLACE FUNCTION wallet.refund_credit_lines(
    p_credit wallet.credits, p_refunded BIGINT, p_client TEXT, p_metadata JSONB)
RETURNS BIGINT[]
LANGUAGE plpgsql AS $$
DECLARE
    v_line   RECORD;
    v_target BIGINT;
    v_ids    BIGINT[] := '{}';
BEGIN
    FOR v_line IN
        SELECT l.*, w.balance FROM wallet.credit_lines l
        JOIN wallet.wallets w ON w.user_id = p_credit.user_id AND w.currency = l.currency
        WHERE l.flow_no = p_credit.flow_no ORDER BY l.currency
    LOOP
        v_target := CASE WHEN p_refunded >= p_credit.amount THEN v_line.amount
                         ELSE floor(v_line.amount::NUMERIC * p_refunded / p_credit.amount)::BIGINT END;
        CONTINUE WHEN v_target <= v_line.refunded_amount;
        v_ids := v_ids || (wallet.post_refund(p_credit, v_line.currency, v_target - v_line.refunded_amount,
                                              v_line.balance, p_client, p_metadata,
                                              jsonb_build_object('refunded_amount', v_target,
                                                                 'partial', v_target < v_line.amount,
                                                                 'credit_amount', v_line.amount,
                                                                 'product_id', p_credit.product_id, 'line', TRUE))).id;
        UPDATE wallet.credit_lines l SET refunded_amount = v_target
        WHERE l.flow_no = p_credit.flow_no AND l.currency = v_line.currency;
    END LOOP;
    RETURN v_ids;
END;
$$;

-- Refunds a credit: a `refund` entry for what is left of it (or the given
-- part). An Apple or admin refund makes the credit `refunded`; a Google one
-- makes it `refunded` once everything is refunded and `partially_refunded`
-- before that. refunded_amount is cumulative: what the store (or admin)
-- refunded.
--
-- A credit with other lines (wallet.credit_lines) refunds their share too
-- (wallet.refund_credit_lines), an entry per currency; the answer is the
-- credit's own currency's.
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
    v_entry    wallet.entries;
    v_metadata JSONB := jsonb_strip_nulls(jsonb_build_object('source', p_source, 'operator', p_operator,
                                                             'reason', p_reason));
    v_lines    BIGINT[] := '{}';
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
        v_entry := wallet.post_refund(v_credit, v_credit.currency, v_amount, v_locked.balance, p_client, v_metadata,
                                      jsonb_build_object(
                                          'refunded_amount', coalesce(v_credit.refunded_amount, 0) + v_amount,
                                          'partial', coalesce(v_credit.refunded_amount, 0) + v_amount < v_credit.amount,
                                          'credit_amount', v_credit.amount, 'product_id', v_credit.product_id));
        shortfall := v_amount + v_entry.amount;
        v_lines := wallet.refund_credit_lines(v_credit, coalesce(v_credit.refunded_amount, 0) + v_amount, p_client,
                                              v_metadata);
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
                CASE WHEN v_entry.id IS NULL THEN '{}'::BIGINT[] ELSE ARRAY[v_entry.id] END || v_lines);
    END IF;
    RETURN NEXT;
END;
$$;

-- Undoes Apple's refund of a credit once (REFUND_REVERSED): a
-- `refund_reversal` entry that gives back what the refund's entries took
-- (the refunded amount, less any shortfall), to the lots they took it
-- from, and the credit is `credited` again; the same for each of its other
-- lines that the refund took from (wallet.credit_lines). Only a refund that
-- came from Apple is reversed this way.
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
        v_entry := wallet.post_refund_reversal(v_credit, v_credit.currency, v_credit.refunded_amount, v_credit.amount,
                                               p_client, '{}');
        PERFORM wallet.post_refund_reversal(v_credit, l.currency, l.refunded_amount, l.amount, p_client,
                                            jsonb_build_object('line', TRUE))
        FROM wallet.credit_lines l WHERE l.flow_no = p_flow_no AND l.refunded_amount > 0 ORDER BY l.currency;
        UPDATE wallet.credit_lines l SET refunded_amount = 0 WHERE l.flow_no = p_flow_no AND l.refunded_amount > 0;
        UPDATE wallet.credits c SET status = 'credited', refunded_by = NULL, refunded_amount = NULL, updated_at = now()
        WHERE c.flow_no = p_flow_no;
        outcome := 'reversed';
        entry_id := v_entry.id;
        amount := v_entry.amount;
        balance := v_entry.balance_after;
    END IF;
    RETURN NEXT;
END;
$$;

-- A reversal's part of one currency: a `refund_reversal` entry giving back
-- what that currency's unreversed refunds took (the refunded `p_reversed`,
-- less any shortfall), with `p_data` for its event. Returns the entry.
CREATE OR REPLACE FUNCTION wallet.post_refund_reversal(
    p_credit wallet.credits, p_currency TEXT, p_reversed BIGINT, p_credit_amount BIGINT, p_client TEXT, p_data JSONB)
RETURNS wallet.entries
LANGUAGE plpgsql AS $$
DECLARE
    v_took BIGINT := (SELECT coalesce(-sum(r.amount), 0) FROM wallet.unreversed_refunds(p_credit.flow_no, p_currency) r);
BEGIN
    RETURN (wallet.post_entries(ARRAY[wallet.new_posting(
        p_kind => 'refund_reversal', p_user_id => p_credit.user_id, p_currency => p_currency,
        p_amount => v_took, p_reference => p_credit.flow_no, p_client => p_client,
        p_metadata => jsonb_build_object('source', 'apple'),
        p_data => jsonb_build_object('reversed_amount', p_reversed, 'credit_amount', p_credit_amount,
                                     'product_id', p_credit.product_id)
            || p_data || CASE WHEN v_took < p_reversed THEN jsonb_build_object('returned', v_took) ELSE '{}' END)]))[1];
END;
$$;

-- What a refund does when the wallet holds less than it takes back
-- (WALLET_REFUND_DEBT: `allow` or `floor`), as the service runs, written
-- at its start-up so that the admin scripts refund alike.
CREATE OR REPLACE FUNCTION wallet.set_refund_debt(p_mode TEXT) RETURNS VOID
LANGUAGE sql AS $$
    UPDATE wallet.lot_settings SET refund_debt = p_mode WHERE refund_debt IS DISTINCT FROM p_mode
$$;
