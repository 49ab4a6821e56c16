-- Google Play voids and notifications, re-applied by the migrator whenever
-- this file changes (tables in 0013_googleplay_voids.sql).

-- Records Google's voids of one purchase token and brings its credit to
-- them: the credit's refunded coins become the unit amount × the voided
-- quantity (all of it once any full refund is reported; else the sum of
-- the partial refunds' quantities, at most the purchase's). A void reported
-- again, by push or by sweep, is the same row and changes nothing. Refunds
-- only ever grow: a void is never undone here.
--
-- p_voids is a JSON array of {voided_at_ms, refund_type, voided_quantity,
-- order_id, source}. p_flow_no is the flowNO the purchase is credited under
-- (Google's orderId, or one derived from the token): its lock serializes a
-- void with a credit of the same purchase, as an App Store refund and its
-- credit are.
--
-- Outcomes: refunded (a refund entry was written), already_refunded
-- (nothing left to refund), unchanged (the credit already stands where
-- the voids put it), revoked (the token was never credited: the voids are
-- kept, and a later credit of it is refused as revoked).
CREATE OR REPLACE FUNCTION wallet.apply_googleplay_voids(p_flow_no TEXT, p_purchase_token TEXT, p_voids JSONB)
RETURNS TABLE (outcome TEXT, entry_id BIGINT, amount BIGINT)
LANGUAGE plpgsql AS $$
DECLARE
    v_credit   wallet.credits;
    v_full     BOOLEAN;
    v_partial  BIGINT;
    v_quantity INTEGER;
    v_target   BIGINT;
    v_done     BIGINT;
BEGIN
    PERFORM wallet.lock_flow_nos(ARRAY[p_flow_no]);
    INSERT INTO wallet.googleplay_voids AS g
        (purchase_token, voided_at, refund_type, voided_quantity, order_id, flow_no, source)
    SELECT p_purchase_token, to_timestamp(v.voided_at_ms / 1000.0), v.refund_type::SMALLINT,
           CASE WHEN v.refund_type = 2 THEN v.voided_quantity END, v.order_id, p_flow_no, v.source
    FROM jsonb_to_recordset(coalesce(p_voids, '[]'::JSONB))
         AS v(voided_at_ms BIGINT, refund_type INTEGER, voided_quantity INTEGER, order_id TEXT, source TEXT)
    ON CONFLICT (purchase_token, voided_at, refund_type) DO NOTHING;

    SELECT * INTO v_credit FROM wallet.credits c WHERE c.purchase_token = p_purchase_token;
    IF NOT FOUND THEN
        outcome := 'revoked';
        RETURN NEXT;
        RETURN;
    END IF;
    IF v_credit.status = 'refunded' THEN
        outcome := 'already_refunded';
        RETURN NEXT;
        RETURN;
    END IF;
    SELECT coalesce(bool_or(g.refund_type = 1), FALSE), coalesce(sum(g.voided_quantity) FILTER (WHERE g.refund_type = 2), 0)
    INTO v_full, v_partial
    FROM wallet.googleplay_voids g WHERE g.purchase_token = p_purchase_token;
    v_quantity := CASE WHEN v_full THEN v_credit.quantity ELSE least(v_partial, v_credit.quantity) END;
    -- The amount is catalog × quantity, so the unit amount is exact.
    v_target := v_credit.amount / v_credit.quantity * v_quantity;
    v_done := coalesce(v_credit.refunded_amount, 0);
    IF v_target <= v_done THEN
        outcome := 'unchanged';
        RETURN NEXT;
        RETURN;
    END IF;
    SELECT r.outcome, r.entry_id, r.amount INTO outcome, entry_id, amount
    FROM wallet.refund_credit(v_credit.flow_no, 'Google Play void', 'google', v_target - v_done, 'google', 'googleplay') r;
    RETURN NEXT;
END;
$$;

-- Records one real-time developer notification, once by its Pub/Sub
-- messageId, and applies the voids that came with it (a void of a
-- one-time product, with what the voided-purchases list said of it) in the
-- same transaction.
--
-- Outcomes: duplicate (this messageId was recorded before; nothing
-- changes), those of wallet.apply_googleplay_voids, or recorded (anything
-- else: kept, no balance change).
CREATE OR REPLACE FUNCTION wallet.apply_googleplay_notification(
    p_message_id TEXT, p_kind TEXT, p_package_name TEXT, p_event_time_ms BIGINT, p_purchase_token TEXT,
    p_order_id TEXT, p_flow_no TEXT, p_payload JSONB, p_voids JSONB)
RETURNS TABLE (outcome TEXT, entry_id BIGINT, amount BIGINT)
LANGUAGE plpgsql AS $$
DECLARE
    v_outcome TEXT := 'recorded';
    v_entry   BIGINT;
    v_amount  BIGINT;
BEGIN
    INSERT INTO wallet.googleplay_notifications
        (message_id, kind, package_name, event_time, purchase_token, order_id, flow_no, outcome, payload)
    VALUES (p_message_id, p_kind, p_package_name, to_timestamp(p_event_time_ms / 1000.0), p_purchase_token,
            p_order_id, p_flow_no, 'pending', p_payload)
    ON CONFLICT (message_id) DO NOTHING;
    IF NOT FOUND THEN
        outcome := 'duplicate';
        RETURN NEXT;
        RETURN;
    END IF;
    IF p_voids IS NOT NULL AND p_flow_no IS NOT NULL AND p_purchase_token IS NOT NULL THEN
        SELECT a.outcome, a.entry_id, a.amount INTO v_outcome, v_entry, v_amount
        FROM wallet.apply_googleplay_voids(p_flow_no, p_purchase_token, p_voids) a;
    END IF;
    UPDATE wallet.googleplay_notifications n SET outcome = v_outcome, entry_id = v_entry
    WHERE n.message_id = p_message_id;
    outcome := v_outcome;
    entry_id := v_entry;
    amount := v_amount;
    RETURN NEXT;
END;
$$;
