-- wallet.apply_appstore_notification, re-applied by the migrator whenever
-- this file changes (first defined in 0005_appstore_notifications.sql; it
-- queues Apple's consumption answers itself since 0017).

-- Applies one verified notification, once, in Apple's order, and, with
-- `p_queue_consumption` (the service answers consumption requests), queues
-- the answer a CONSUMPTION_REQUEST asks for.
--
-- Per flowNO, the REFUND or REFUND_REVERSED with the latest signedDate
-- decides (wallet.appstore_refund_states keeps it); on a tie REFUND_REVERSED
-- comes after REFUND, so a tie ends credited. One older than the decisive
-- one changes nothing. One as new or newer becomes the decisive one and is
-- applied to the credit through wallet.refund_credit or
-- wallet.reverse_refund, the functions the admin scripts share.
--
-- Outcomes:
--   duplicate         this notificationUUID was seen before; nothing changes
--   superseded        REFUND or REFUND_REVERSED older than the decisive one
--                     for its flowNO (Apple's order, not arrival order);
--                     nothing changes
--   refunded          REFUND of a credited consumable: a refund entry (the
--                     stored amount, or its prorated part), status refunded
--   already_refunded  REFUND of a credit already refunded; nothing changes
--   reversed          REFUND_REVERSED of an Apple refund: a refund_reversal
--                     entry, status credited again
--   not_refunded, not_reversible
--                     REFUND_REVERSED with nothing of Apple's to reverse;
--                     for a flowNO not yet credited it is remembered, so an
--                     older REFUND arriving later is superseded
--   revoked           REFUND of a flowNO never credited: remembered, so a
--                     later credit attempt for it is refused
--   unrevoked         REFUND_REVERSED of a revoked flowNO never credited: a
--                     later credit of it is accepted again
--   recorded          anything else (REFUND_DECLINED, CONSUMPTION_REQUEST,
--                     TEST, other product types, a prorated refund of
--                     nothing): kept, no balance change
-- `consumption_queued` says whether an answer to Apple was queued.
--
-- Lock order (01_lock_flow_nos.sql): the flowNO is locked before anything
-- is read, so a concurrent credit of it either commits first, and is
-- refunded here, or waits and then finds it revoked; then (in
-- wallet.lock_credit) the credit's wallet row and the credit row.
CREATE OR REPLACE FUNCTION wallet.apply_appstore_notification(
    p_notification_uuid TEXT, p_notification_type TEXT, p_subtype TEXT, p_environment TEXT,
    p_signed_date TIMESTAMPTZ, p_flow_no TEXT, p_product_type TEXT, p_revocation_type TEXT,
    p_revocation_percentage BIGINT, p_payload JSONB, p_queue_consumption BOOLEAN)
RETURNS TABLE (outcome TEXT, entry_id BIGINT, consumption_queued BOOLEAN)
LANGUAGE plpgsql AS $$
BEGIN
    IF p_flow_no IS NOT NULL THEN
        PERFORM wallet.lock_flow_nos(ARRAY[p_flow_no]);
    END IF;

    -- Claim the notification: a concurrent delivery of the same one waits
    -- here and then sees it as a duplicate.
    INSERT INTO wallet.appstore_notifications AS n
        (notification_uuid, notification_type, subtype, flow_no, environment, signed_date, outcome, payload)
    VALUES (p_notification_uuid, p_notification_type, p_subtype, p_flow_no, p_environment, p_signed_date,
            'pending', p_payload)
    ON CONFLICT (notification_uuid) DO NOTHING;
    consumption_queued := FALSE;
    IF NOT FOUND THEN
        outcome := 'duplicate';
        RETURN NEXT;
        RETURN;
    END IF;

    outcome := 'recorded';
    -- A transaction id longer than a flowNO may be can never have been
    -- credited, nor be: it is only recorded.
    IF length(p_flow_no) BETWEEN 1 AND 128 AND p_product_type = 'Consumable'
       AND p_notification_type IN ('REFUND', 'REFUND_REVERSED') THEN
        SELECT a.outcome, a.entry_id INTO outcome, entry_id
        FROM wallet.apply_appstore_refund(p_notification_uuid, p_notification_type, p_signed_date, p_flow_no,
                                          p_revocation_type, p_revocation_percentage) a;
    ELSIF p_queue_consumption AND p_notification_type = 'CONSUMPTION_REQUEST' THEN
        consumption_queued := wallet.queue_consumption_answer(p_notification_uuid, p_flow_no, p_product_type,
                                                              p_environment, p_signed_date);
    END IF;

    UPDATE wallet.appstore_notifications n
    SET outcome = apply_appstore_notification.outcome, entry_id = apply_appstore_notification.entry_id
    WHERE n.notification_uuid = p_notification_uuid;
    RETURN NEXT;
END;
$$;

-- A REFUND or REFUND_REVERSED of a consumable, in Apple's order (see
-- wallet.apply_appstore_notification); called with the flowNO locked.
CREATE OR REPLACE FUNCTION wallet.apply_appstore_refund(
    p_notification_uuid TEXT, p_notification_type TEXT, p_signed_date TIMESTAMPTZ, p_flow_no TEXT,
    p_revocation_type TEXT, p_revocation_percentage BIGINT,
    OUT outcome TEXT, OUT entry_id BIGINT)
LANGUAGE plpgsql AS $$
DECLARE
    v_credit wallet.credits;
    v_state  wallet.appstore_refund_states;
    v_amount BIGINT;
BEGIN
    outcome := 'recorded';
    SELECT * INTO v_state FROM wallet.appstore_refund_states s WHERE s.flow_no = p_flow_no;
    -- FALSE < TRUE: on the same signedDate a REFUND is older than a
    -- REFUND_REVERSED.
    IF v_state.flow_no IS NOT NULL
       AND (p_signed_date, p_notification_type = 'REFUND_REVERSED')
           < (v_state.signed_date, v_state.notification_type = 'REFUND_REVERSED') THEN
        outcome := 'superseded';
        RETURN;
    END IF;
    INSERT INTO wallet.appstore_refund_states AS s (flow_no, notification_type, signed_date, notification_uuid)
    VALUES (p_flow_no, p_notification_type, p_signed_date, p_notification_uuid)
    ON CONFLICT (flow_no) DO UPDATE
        SET notification_type = EXCLUDED.notification_type, signed_date = EXCLUDED.signed_date,
            notification_uuid = EXCLUDED.notification_uuid, updated_at = now();

    SELECT * INTO v_credit FROM wallet.credits c WHERE c.flow_no = p_flow_no;
    IF NOT FOUND THEN
        outcome := CASE WHEN p_notification_type = 'REFUND' THEN 'revoked'
                        WHEN v_state.notification_type = 'REFUND' THEN 'unrevoked'
                        ELSE 'not_refunded' END;
    ELSIF p_notification_type = 'REFUND' THEN
        v_amount := v_credit.amount;
        IF p_revocation_type = 'REFUND_PRORATED' AND p_revocation_percentage IS NOT NULL THEN
            -- revocationPercentage is in thousandths of a percent.
            v_amount := (v_credit.amount * least(greatest(p_revocation_percentage, 0), 100000)) / 100000;
        END IF;
        IF v_amount > 0 THEN
            SELECT r.outcome, r.entry_id INTO outcome, entry_id
            FROM wallet.refund_credit(p_flow_no, 'App Store refund', 'apple', v_amount, 'apple', 'appstore') r;
        END IF;
    ELSE
        SELECT r.outcome, r.entry_id INTO outcome, entry_id
        FROM wallet.reverse_refund(p_flow_no, 'appstore') r;
    END IF;
END;
$$;

-- Queues the answer a CONSUMPTION_REQUEST asks for, in the transaction that
-- records it, so the two are kept or lost together; returns whether it
-- did. Apple asks about consumables only, in its two environments, and
-- weighs an answer for 12 hours from its request (signedDate). A
-- notification is recorded once, so a duplicate never comes here; the
-- outbox key (its notificationUUID) keeps one answer per request anyway.
CREATE OR REPLACE FUNCTION wallet.queue_consumption_answer(
    p_notification_uuid TEXT, p_flow_no TEXT, p_product_type TEXT, p_environment TEXT, p_signed_date TIMESTAMPTZ)
RETURNS BOOLEAN
LANGUAGE plpgsql AS $$
BEGIN
    IF NOT coalesce(p_product_type = 'Consumable' AND length(p_flow_no) BETWEEN 1 AND 128
                    AND p_environment IN ('Production', 'Sandbox'), FALSE) THEN
        RETURN FALSE;
    END IF;
    INSERT INTO wallet.outbox (kind, key, flow_no, environment, requested_at, window_ends_at)
    VALUES ('appstore_consumption', p_notification_uuid, p_flow_no, p_environment, p_signed_date,
            p_signed_date + INTERVAL '12 hours')
    ON CONFLICT (kind, key) DO NOTHING;
    RETURN FOUND;
END;
$$;

-- The previous release's call, which queued consumption answers itself:
-- its instances keep applying notifications while the new ones start. A
-- later migration drops it.
CREATE OR REPLACE FUNCTION wallet.apply_appstore_notification(
    p_notification_uuid TEXT, p_notification_type TEXT, p_subtype TEXT, p_environment TEXT,
    p_signed_date TIMESTAMPTZ, p_flow_no TEXT, p_product_type TEXT, p_revocation_type TEXT,
    p_revocation_percentage BIGINT, p_payload JSONB)
RETURNS TABLE (outcome TEXT, entry_id BIGINT)
LANGUAGE sql AS $$
    SELECT a.outcome, a.entry_id
    FROM wallet.apply_appstore_notification(p_notification_uuid, p_notification_type, p_subtype, p_environment,
                                            p_signed_date, p_flow_no, p_product_type, p_revocation_type,
                                            p_revocation_percentage, p_payload, FALSE) a;
$$;
