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

-- wallet.refund_credit learns Google's cumulative refunds in
-- Migrations/functions/09_refund_credit.sql.
