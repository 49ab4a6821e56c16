-- Google Play voided purchases: refunds that converge on Google's word,
-- kept per purchase token whichever way they arrive (a real-time developer
-- notification pushed by Pub/Sub, or the voided-purchases sweep), and the
-- notifications themselves.

-- A Google credit refunded in part (a quantity-based partial refund) is
-- `partially_refunded`; refunded_amount is cumulative, and a later void of
-- the rest makes it `refunded`.
ALTER TABLE wallet.credits DROP CONSTRAINT credits_status_check;
ALTER TABLE wallet.credits ADD CONSTRAINT credits_status_check
    CHECK (status IN ('credited', 'partially_refunded', 'refunded'));
ALTER TABLE wallet.credits DROP CONSTRAINT credits_refunded_by_check;
ALTER TABLE wallet.credits ADD CONSTRAINT credits_refunded_by_check
    CHECK (refunded_by IN ('apple', 'admin', 'google'));
ALTER TABLE wallet.credits DROP CONSTRAINT credits_refund_state;
ALTER TABLE wallet.credits ADD CONSTRAINT credits_refund_state CHECK (
    (status IN ('refunded', 'partially_refunded')) = (refunded_by IS NOT NULL AND refunded_amount IS NOT NULL));
ALTER TABLE wallet.credits ADD CONSTRAINT credits_partial_refund
    CHECK (status <> 'partially_refunded' OR refunded_amount < amount);

-- Every void Google reported for a purchase token: one row per void (its
-- time and kind), however often it is reported. A full refund voids the
-- whole purchase; a quantity-based partial refund voids `voided_quantity`
-- units. The flowNO is the one the purchase is (or would be) credited
-- under, whose lock a void and a credit of the token share.
CREATE TABLE wallet.googleplay_voids (
    purchase_token  TEXT COLLATE "C" NOT NULL CHECK (length(purchase_token) BETWEEN 1 AND 1024),
    voided_at       TIMESTAMPTZ NOT NULL,
    refund_type     SMALLINT NOT NULL CHECK (refund_type IN (1, 2)),
    voided_quantity INTEGER CHECK (voided_quantity BETWEEN 1 AND 10),
    order_id        TEXT,
    flow_no         TEXT COLLATE "C" NOT NULL CHECK (length(flow_no) BETWEEN 1 AND 128),
    -- How it first arrived: 'push' (a notification) or 'sweep'.
    source          TEXT NOT NULL CHECK (source IN ('push', 'sweep')),
    recorded_at     TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (purchase_token, voided_at, refund_type),
    CONSTRAINT googleplay_voids_quantity CHECK ((refund_type = 2) = (voided_quantity IS NOT NULL))
);
CREATE INDEX googleplay_voids_flow_no ON wallet.googleplay_voids (flow_no);

-- Real-time developer notifications, once each by Pub/Sub messageId.
CREATE TABLE wallet.googleplay_notifications (
    message_id     TEXT PRIMARY KEY CHECK (length(message_id) BETWEEN 1 AND 200),
    kind           TEXT NOT NULL
        CHECK (kind IN ('voided_purchase', 'one_time_product', 'subscription', 'test', 'other')),
    package_name   TEXT NOT NULL,
    event_time     TIMESTAMPTZ NOT NULL,
    purchase_token TEXT COLLATE "C",
    order_id       TEXT,
    flow_no        TEXT COLLATE "C",
    outcome        TEXT NOT NULL,
    entry_id       BIGINT REFERENCES wallet.entries (id),
    -- The decoded notification (the Pub/Sub message's data).
    payload        JSONB NOT NULL,
    received_at    TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX googleplay_notifications_flow_no ON wallet.googleplay_notifications (flow_no);
CREATE INDEX googleplay_notifications_received ON wallet.googleplay_notifications USING brin (received_at);

-- The voided-purchases sweep keeps its high-water mark beside the App Store
-- reconciliation's, under the same advisory lock.
ALTER TABLE wallet.appstore_reconcile_marks DROP CONSTRAINT appstore_reconcile_marks_environment_check;
ALTER TABLE wallet.appstore_reconcile_marks ADD CONSTRAINT appstore_reconcile_marks_environment_check
    CHECK (environment IN ('Production', 'Sandbox', 'googleplay-voided'));
COMMENT ON COLUMN wallet.appstore_reconcile_marks.environment IS
    'The sweep: an App Store environment (notification history), or googleplay-voided.';

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
