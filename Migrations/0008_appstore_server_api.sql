-- The App Store Server API: credits verified by asking Apple about a bare
-- flowNO, the answers the service owes Apple's consumption requests, and
-- how far notification reconciliation has come.

-- A credit verified by Get Transaction Info records its own source.
ALTER TABLE wallet.credits DROP CONSTRAINT credits_source_check;
ALTER TABLE wallet.credits ADD CONSTRAINT credits_source_check
    CHECK (source IN ('caller', 'appstore-jws', 'appstore-receipt', 'appstore-api'));

-- The outbox of Send Consumption Information: one row per CONSUMPTION_REQUEST
-- notification, queued in the statement that records the notification, and
-- sent by the service off the request path. A notification is recorded
-- once (by its notificationUUID), so a duplicate queues nothing.
--
-- status: pending (to send at next_attempt_at), sent (Apple accepted it),
-- failed (Apple refused it, or its 12-hour window passed). request_body is
-- what was last sent.
CREATE TABLE wallet.appstore_consumption_requests (
    notification_uuid TEXT PRIMARY KEY REFERENCES wallet.appstore_notifications (notification_uuid),
    flow_no           TEXT COLLATE "C" NOT NULL CHECK (length(flow_no) BETWEEN 1 AND 128),
    environment       TEXT NOT NULL CHECK (environment IN ('Production', 'Sandbox')),
    status            TEXT NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'sent', 'failed')),
    attempts          INTEGER NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    last_error        TEXT,
    next_attempt_at   TIMESTAMPTZ NOT NULL DEFAULT now(),
    request_body      JSONB,
    created_at        TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at        TIMESTAMPTZ NOT NULL DEFAULT now(),
    sent_at           TIMESTAMPTZ,
    CONSTRAINT appstore_consumption_sent CHECK ((status = 'sent') = (sent_at IS NOT NULL))
);
CREATE INDEX appstore_consumption_due ON wallet.appstore_consumption_requests (next_attempt_at)
    WHERE status = 'pending';
CREATE INDEX appstore_consumption_flow_no ON wallet.appstore_consumption_requests (flow_no);

-- Per environment, the end of the last notification-history sweep that
-- read everything it asked for. The next sweep starts an hour before it.
CREATE TABLE wallet.appstore_reconcile_marks (
    environment TEXT PRIMARY KEY CHECK (environment IN ('Production', 'Sandbox')),
    swept_until TIMESTAMPTZ NOT NULL,
    updated_at  TIMESTAMPTZ NOT NULL DEFAULT now()
);
