-- Google Play purchases: credited once per purchase token, in the same
-- credits table and under the same per-flowNO locks as the App Store's, and
-- consumed through one outbox that now carries both stores' calls.

-- The catalog names each product's Google Play product id; NULL means the
-- same id as ours (Scripts/admin/product.sql -v google_product_id=...).
-- Google's ids: lowercase letters, digits, underscores and periods.
ALTER TABLE wallet.products ADD COLUMN google_product_id TEXT COLLATE "C"
    CHECK (length(google_product_id) BETWEEN 1 AND 128 AND google_product_id ~ '^[a-z0-9][a-z0-9._]*$');

-- A Google credit records how it was verified, in which environment Google
-- says it was bought (a licence tester's `Test`, a promo code's `Promo`, or
-- `Production`), and its purchase token: one token credits once, whatever
-- flowNO it would be given.
ALTER TABLE wallet.credits DROP CONSTRAINT credits_source_check;
ALTER TABLE wallet.credits ADD CONSTRAINT credits_source_check
    CHECK (source IN ('caller', 'appstore-jws', 'appstore-receipt', 'appstore-api', 'googleplay'));
ALTER TABLE wallet.credits DROP CONSTRAINT credits_environment_check;
ALTER TABLE wallet.credits ADD CONSTRAINT credits_environment_check
    CHECK (environment IN ('Production', 'Sandbox', 'Test', 'Promo'));
ALTER TABLE wallet.credits ADD COLUMN purchase_token TEXT COLLATE "C"
    CHECK (length(purchase_token) BETWEEN 1 AND 1024);
ALTER TABLE wallet.credits ADD CONSTRAINT credits_googleplay_token
    CHECK ((source = 'googleplay') = (purchase_token IS NOT NULL));
CREATE UNIQUE INDEX credits_purchase_token ON wallet.credits (purchase_token) WHERE purchase_token IS NOT NULL;

-- The outbox: calls the service owes a store, queued in the transaction
-- that makes them owed and sent off the request path, each retried with a
-- doubling pause until it is sent, refused, or its window ends.
--
--   appstore_consumption  Send Consumption Information for a CONSUMPTION_REQUEST
--                         notification (key: its notificationUUID); Apple's
--                         window is 12 hours from the request.
--   googleplay_consume    Consume a Google Play purchase once it is credited
--                         (key: its purchase token), so Google does not
--                         refund it after 3 days; the window is those 3 days.
--
-- status: pending (due at next_attempt_at), sent, failed (refused, or the
-- window passed). request_body is what was last sent, when there is one.
CREATE TABLE wallet.outbox (
    kind            TEXT NOT NULL CHECK (kind IN ('appstore_consumption', 'googleplay_consume')),
    key             TEXT COLLATE "C" NOT NULL CHECK (length(key) BETWEEN 1 AND 1024),
    flow_no         TEXT COLLATE "C" NOT NULL CHECK (length(flow_no) BETWEEN 1 AND 128),
    environment     TEXT NOT NULL,
    status          TEXT NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'sent', 'failed')),
    attempts        INTEGER NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    last_error      TEXT,
    next_attempt_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    -- When the store asked (Apple's signedDate) or the call became owed.
    requested_at    TIMESTAMPTZ NOT NULL DEFAULT now(),
    -- After this the call is pointless and the row fails.
    window_ends_at  TIMESTAMPTZ NOT NULL,
    request_body    JSONB,
    created_at      TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at      TIMESTAMPTZ NOT NULL DEFAULT now(),
    sent_at         TIMESTAMPTZ,
    PRIMARY KEY (kind, key),
    CONSTRAINT outbox_sent CHECK ((status = 'sent') = (sent_at IS NOT NULL))
);
CREATE INDEX outbox_due ON wallet.outbox (next_attempt_at) WHERE status = 'pending';
CREATE INDEX outbox_flow_no ON wallet.outbox (flow_no);

-- Apple's consumption answers move in, as they stand.
INSERT INTO wallet.outbox (kind, key, flow_no, environment, status, attempts, last_error, next_attempt_at,
                           requested_at, window_ends_at, request_body, created_at, updated_at, sent_at)
SELECT 'appstore_consumption', r.notification_uuid, r.flow_no, r.environment, r.status, r.attempts, r.last_error,
       r.next_attempt_at, n.signed_date, n.signed_date + INTERVAL '12 hours', r.request_body, r.created_at,
       r.updated_at, r.sent_at
FROM wallet.appstore_consumption_requests r
JOIN wallet.appstore_notifications n ON n.notification_uuid = r.notification_uuid;

COMMENT ON TABLE wallet.appstore_consumption_requests IS
    'No longer written since 0012: see wallet.outbox (kind appstore_consumption).';

-- Catalog changes name the Google Play product id too. NULL keeps the
-- product's current one; '' sets it back to the product's own id.
DROP FUNCTION wallet.upsert_product(TEXT, BIGINT, TEXT, BOOLEAN, TEXT, TEXT);
-- The function, with its new argument, is in
-- Migrations/functions/10_upsert_product.sql.
