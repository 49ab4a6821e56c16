-- Webhook deliveries go out in batches read straight from wallet.events: an
-- event an endpoint gets on the first try leaves no row. A delivery row is
-- written only for an event that failed, and for the later events of the
-- same player, queued behind it so the player's events still arrive in
-- order (Migrations/functions/16_webhooks.sql).
--
-- `dispatched_through` now means: every event up to it that the endpoint
-- receives was delivered or has its row. `leased_until`: an instance is
-- sending the batch after it, and no other takes the endpoint before.
ALTER TABLE wallet.webhook_endpoints ADD COLUMN leased_until TIMESTAMPTZ;

-- The pending rows of an endpoint in event order, for the retry path's lease.
CREATE INDEX webhook_deliveries_pending_order ON wallet.webhook_deliveries (endpoint_id, event_id)
    WHERE status = 'pending';

-- The function the batch path replaces.
DROP FUNCTION IF EXISTS wallet.dispatch_webhook_events(INTEGER);
