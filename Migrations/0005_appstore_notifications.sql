-- App Store Server Notifications V2. Each notification is kept once, by its
-- notificationUUID; refunds and their reversals go through the same
-- functions as the admin scripts (wallet.refund_credit, wallet.reverse_refund).

CREATE TABLE wallet.appstore_notifications (
    notification_uuid TEXT PRIMARY KEY CHECK (length(notification_uuid) BETWEEN 1 AND 128),
    notification_type TEXT NOT NULL,
    subtype           TEXT,
    flow_no           TEXT,
    environment       TEXT NOT NULL,
    signed_date       TIMESTAMPTZ NOT NULL,
    outcome           TEXT NOT NULL,
    entry_id          BIGINT REFERENCES wallet.entries (id),
    payload           JSONB NOT NULL,
    received_at       TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX appstore_notifications_flow_no ON wallet.appstore_notifications (flow_no);

-- Kept for good: never deleted, and only a row still 'pending' (claimed by
-- the transaction that is applying it) may be given its outcome.
CREATE FUNCTION wallet.appstore_notifications_guard() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'UPDATE' AND OLD.outcome = 'pending'
       AND (NEW.notification_uuid, NEW.notification_type, NEW.payload)
           IS NOT DISTINCT FROM (OLD.notification_uuid, OLD.notification_type, OLD.payload) THEN
        RETURN NEW;
    END IF;
    RAISE EXCEPTION 'appstore_notifications rows are kept as recorded' USING ERRCODE = 'WL001';
END;
$$;
CREATE TRIGGER appstore_notifications_kept BEFORE UPDATE OR DELETE ON wallet.appstore_notifications
    FOR EACH ROW EXECUTE FUNCTION wallet.appstore_notifications_guard();
CREATE TRIGGER appstore_notifications_no_truncate BEFORE TRUNCATE ON wallet.appstore_notifications
    FOR EACH STATEMENT EXECUTE FUNCTION wallet.refuse_change();

-- Applies one verified notification, once.
--
-- Outcomes:
--   duplicate         this notificationUUID was seen before; nothing changes
--   refunded          REFUND of a credited consumable: a refund entry (the
--                     stored amount, or its prorated part), status refunded
--   already_refunded  REFUND of a credit already refunded; nothing changes
--   reversed          REFUND_REVERSED of an Apple refund: a refund_reversal
--                     entry, status credited again
--   not_refunded, not_reversible
--                     REFUND_REVERSED with nothing of Apple's to reverse
--   revoked           REFUND of a flowNO never credited: remembered, so a
--                     later credit attempt for it is refused
--   recorded          anything else (REFUND_DECLINED, CONSUMPTION_REQUEST,
--                     TEST, other product types): kept, no balance change
CREATE FUNCTION wallet.apply_appstore_notification(
    p_notification_uuid TEXT, p_notification_type TEXT, p_subtype TEXT, p_environment TEXT,
    p_signed_date TIMESTAMPTZ, p_flow_no TEXT, p_product_type TEXT, p_revocation_type TEXT,
    p_revocation_percentage BIGINT, p_payload JSONB)
RETURNS TABLE (outcome TEXT, entry_id BIGINT)
LANGUAGE plpgsql AS $$
DECLARE
    v_credit  wallet.credits;
    v_amount  BIGINT;
    v_outcome TEXT := 'recorded';
    v_entry   BIGINT;
BEGIN
    -- Claim the notification first: a concurrent delivery of the same one
    -- waits here and then sees it as a duplicate.
    INSERT INTO wallet.appstore_notifications AS n
        (notification_uuid, notification_type, subtype, flow_no, environment, signed_date, outcome, payload)
    VALUES (p_notification_uuid, p_notification_type, p_subtype, p_flow_no, p_environment, p_signed_date,
            'pending', p_payload)
    ON CONFLICT (notification_uuid) DO NOTHING;
    IF NOT FOUND THEN
        outcome := 'duplicate';
        RETURN NEXT;
        RETURN;
    END IF;

    IF p_flow_no IS NOT NULL AND p_product_type = 'Consumable'
       AND p_notification_type IN ('REFUND', 'REFUND_REVERSED') THEN
        SELECT * INTO v_credit FROM wallet.credits c WHERE c.flow_no = p_flow_no;
        IF NOT FOUND THEN
            IF p_notification_type = 'REFUND' THEN
                INSERT INTO wallet.revoked_flow_nos (flow_no, notification_uuid)
                VALUES (p_flow_no, p_notification_uuid) ON CONFLICT DO NOTHING;
                v_outcome := 'revoked';
            END IF;
        ELSIF p_notification_type = 'REFUND' THEN
            v_amount := v_credit.amount;
            IF p_revocation_type = 'REFUND_PRORATED' AND p_revocation_percentage IS NOT NULL THEN
                -- revocationPercentage is in thousandths of a percent.
                v_amount := (v_credit.amount * least(greatest(p_revocation_percentage, 0), 100000)) / 100000;
            END IF;
            IF v_amount > 0 THEN
                SELECT r.outcome, r.entry_id INTO v_outcome, v_entry
                FROM wallet.refund_credit(p_flow_no, 'App Store refund', 'apple', v_amount, 'apple', 'appstore') r;
            END IF;
        ELSE
            SELECT r.outcome, r.entry_id INTO v_outcome, v_entry
            FROM wallet.reverse_refund(p_flow_no, 'appstore') r;
        END IF;
    END IF;

    UPDATE wallet.appstore_notifications n SET outcome = v_outcome, entry_id = v_entry
    WHERE n.notification_uuid = p_notification_uuid;
    outcome := v_outcome;
    entry_id := v_entry;
    RETURN NEXT;
END;
$$;
