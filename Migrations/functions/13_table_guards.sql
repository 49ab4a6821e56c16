-- Helpers the tables' defaults, checks and triggers use, re-applied by the
-- migrator whenever this file changes (first defined with their tables:
-- rfc3339 and refuse_change in 0001_wallet_schema.sql, the notifications'
-- guard in 0005_appstore_notifications.sql, the holds' in 0009_holds.sql); and
-- the events' guard with its triggers (their table is in 0019_events.sql).

-- A timestamp as RFC 3339 UTC text with microseconds, as the API writes it.
CREATE OR REPLACE FUNCTION wallet.rfc3339(t TIMESTAMPTZ) RETURNS TEXT
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN to_char(t AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"');

-- Refuses any change to an append-only table (WL001).
CREATE OR REPLACE FUNCTION wallet.refuse_change() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION '% is append-only', TG_TABLE_NAME USING ERRCODE = 'WL001';
END;
$$;

-- App Store notifications are kept for good: never deleted, and only a row
-- still 'pending' (claimed by the transaction that is applying it) may be
-- given its outcome.
CREATE OR REPLACE FUNCTION wallet.appstore_notifications_guard() RETURNS trigger
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

-- Holds are kept for good, and only a `held` hold changes, once.
CREATE OR REPLACE FUNCTION wallet.holds_guard() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'UPDATE' AND OLD.status = 'held' AND NEW.status <> 'held'
       AND (NEW.id, NEW.client, NEW.user_id, NEW.currency, NEW.amount, NEW.expires_at, NEW.created_at)
           IS NOT DISTINCT FROM (OLD.id, OLD.client, OLD.user_id, OLD.currency, OLD.amount, OLD.expires_at, OLD.created_at)
    THEN
        RETURN NEW;
    END IF;
    RAISE EXCEPTION 'a hold changes only from held, once' USING ERRCODE = 'WL001';
END;
$$;

-- Events are never changed, and deleted only by wallet.purge_events, which
-- says so for its transaction.
CREATE OR REPLACE FUNCTION wallet.events_guard() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' AND current_setting('wallet.purging_events', TRUE) = 'on' THEN
        RETURN OLD;
    END IF;
    RAISE EXCEPTION 'events are kept as written, and deleted only by wallet.purge_events' USING ERRCODE = 'WL001';
END;
$$;
CREATE OR REPLACE TRIGGER events_guard BEFORE UPDATE OR DELETE ON wallet.events
    FOR EACH ROW EXECUTE FUNCTION wallet.events_guard();
CREATE OR REPLACE TRIGGER events_no_truncate BEFORE TRUNCATE ON wallet.events
    FOR EACH STATEMENT EXECUTE FUNCTION wallet.refuse_change();
