-- Apple's refund decisions in Apple's order rather than in arrival order.
--
-- Apple retries notifications, so a REFUND_REVERSED can arrive before the
-- REFUND it reverses. Per flowNO this table keeps the decisive App Store
-- notification so far: the REFUND or REFUND_REVERSED with the latest
-- signedDate (on a tie, REFUND_REVERSED, so a tie ends credited). An older
-- one arriving later changes nothing (outcome `superseded`).
--
-- It also replaces wallet.revoked_flow_nos as the record of a flowNO that
-- Apple refunded before it was credited: a credit is refused while the
-- decisive notification of its never-credited flowNO is a REFUND, and
-- accepted again once a later REFUND_REVERSED decides. revoked_flow_nos is
-- no longer written; it stays as history and for instances of the previous
-- release still running during an upgrade.
--
-- The functions that read and write it (wallet.credit_many,
-- wallet.apply_appstore_notification) live in Migrations/functions/.

CREATE TABLE wallet.appstore_refund_states (
    flow_no           TEXT COLLATE "C" PRIMARY KEY CHECK (length(flow_no) BETWEEN 1 AND 128),
    notification_type TEXT NOT NULL CHECK (notification_type IN ('REFUND', 'REFUND_REVERSED')),
    -- The notification's own signedDate, from its signed payload.
    signed_date       TIMESTAMPTZ NOT NULL,
    -- NULL only for a revocation carried over from revoked_flow_nos without
    -- its notification.
    notification_uuid TEXT REFERENCES wallet.appstore_notifications (notification_uuid),
    updated_at        TIMESTAMPTZ NOT NULL DEFAULT now()
);

-- What the previous release applied, as it applied it: per flowNO, the last
-- REFUND or REFUND_REVERSED to arrive that reached the refund functions, so
-- the state agrees with the ledger as it stands.
INSERT INTO wallet.appstore_refund_states (flow_no, notification_type, signed_date, notification_uuid)
SELECT DISTINCT ON (n.flow_no) n.flow_no, n.notification_type, n.signed_date, n.notification_uuid
FROM wallet.appstore_notifications n
WHERE n.flow_no IS NOT NULL
  AND n.notification_type IN ('REFUND', 'REFUND_REVERSED')
  AND n.outcome IN ('refunded', 'already_refunded', 'revoked', 'reversed', 'not_refunded', 'not_reversible')
  AND length(n.flow_no) BETWEEN 1 AND 128
ORDER BY n.flow_no, n.received_at DESC, n.notification_uuid DESC;

INSERT INTO wallet.appstore_refund_states (flow_no, notification_type, signed_date, notification_uuid)
SELECT r.flow_no, 'REFUND', r.recorded_at, NULL
FROM wallet.revoked_flow_nos r
WHERE length(r.flow_no) BETWEEN 1 AND 128
ON CONFLICT (flow_no) DO NOTHING;

COMMENT ON TABLE wallet.revoked_flow_nos IS
    'No longer written since 0006: see wallet.appstore_refund_states.';
