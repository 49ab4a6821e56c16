-- Webhooks: endpoints that receive every event of the types they chose,
-- one POST per event, at least once and in order per player. The functions
-- are in Migrations/functions/16_webhooks.sql.

-- An endpoint (wallet webhooks add|list|disable|enable). `event_types` is
-- the types it receives, or {*} for all. Its secret signs each delivery
-- (HMAC-SHA256), so it is kept as given: whoever reads this table can sign
-- as the service. `dispatched_through`: every event up to this id that the
-- endpoint receives has its delivery row.
CREATE TABLE wallet.webhook_endpoints (
    id                 BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    url                TEXT NOT NULL CHECK (length(url) <= 2048 AND url ~ '^https?://[^/?#@[:space:]]+(/[^[:space:]]*)?$'),
    event_types        TEXT[] NOT NULL CHECK (
        event_types = '{*}' OR (cardinality(event_types) > 0 AND event_types <@ ARRAY[
            'credit.created', 'credit.refunded', 'credit.refund_reversed', 'debit.created',
            'hold.placed', 'hold.captured', 'hold.released', 'hold.expired',
            'grant.created', 'revoke.created', 'balance.negative'])),
    secret             BYTEA NOT NULL CHECK (length(secret) BETWEEN 16 AND 4096),
    enabled            BOOLEAN NOT NULL DEFAULT TRUE,
    -- Why it is disabled: an operator's reason, or that it failed every
    -- delivery for the retry period.
    disabled_reason    TEXT,
    dispatched_through BIGINT NOT NULL,
    -- Since when every attempt has failed (NULL after a success).
    failing_since      TIMESTAMPTZ,
    last_success_at    TIMESTAMPTZ,
    created_at         TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at         TIMESTAMPTZ NOT NULL DEFAULT now(),
    CONSTRAINT webhook_endpoints_disabled CHECK (enabled = (disabled_reason IS NULL))
);

-- One event owed to one endpoint. `pending` until a 2xx answer
-- (`delivered`) or the end of the retry period (`failed`); a player's next
-- event goes to the endpoint only once the one before is no longer pending.
-- `leased_until`: a sender is trying it now, and no other takes it before.
CREATE TABLE wallet.webhook_deliveries (
    endpoint_id      BIGINT NOT NULL REFERENCES wallet.webhook_endpoints (id),
    event_id         BIGINT NOT NULL,
    user_id          TEXT COLLATE "C" NOT NULL,
    status           TEXT NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'delivered', 'failed')),
    attempts         INTEGER NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    event_created_at TIMESTAMPTZ NOT NULL,
    next_attempt_at  TIMESTAMPTZ NOT NULL,
    leased_until     TIMESTAMPTZ,
    last_attempt_at  TIMESTAMPTZ,
    -- The last answer's status, or NULL when there was none (no connection,
    -- the time limit), with what went wrong in words.
    last_status      INTEGER,
    last_error       TEXT,
    finished_at      TIMESTAMPTZ,
    PRIMARY KEY (endpoint_id, event_id),
    CONSTRAINT webhook_deliveries_finished CHECK ((status = 'pending') = (finished_at IS NULL))
);
-- A player's pending deliveries to an endpoint, in order: the head of the
-- line is the first.
CREATE INDEX webhook_deliveries_pending ON wallet.webhook_deliveries (endpoint_id, user_id, event_id)
    WHERE status = 'pending';
-- What is due.
CREATE INDEX webhook_deliveries_due ON wallet.webhook_deliveries (next_attempt_at) WHERE status = 'pending';
-- Finished deliveries, for the console's recent list and for the purge.
CREATE INDEX webhook_deliveries_finished ON wallet.webhook_deliveries (finished_at) WHERE status <> 'pending';

-- Endpoint changes are audited; an endpoint the service disables for
-- failing is audited as the service's.
ALTER TABLE wallet.admin_audit DROP CONSTRAINT admin_audit_action_check;
ALTER TABLE wallet.admin_audit ADD CONSTRAINT admin_audit_action_check
    CHECK (action IN ('refund', 'grant', 'revoke', 'product', 'release_hold', 'revoke_key',
                      'webhook_add', 'webhook_disable', 'webhook_enable'));
