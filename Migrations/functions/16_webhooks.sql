-- Webhooks, re-applied by the migrator whenever this file changes (the
-- tables are in 0020_webhooks.sql, batches since 0021_webhook_batches.sql).
--
-- How an event reaches an endpoint:
-- 1. wallet.lease_webhook_batch leases an endpoint (one instance at a time)
--    and reads the next events of its types after its mark, up to the
--    feed's visibility bound (wallet.events_visible_through), so no event
--    is skipped for one that commits later; each says whether its player
--    is waiting on an earlier, failed event.
-- 2. The sender POSTs each player's events in order and stops at a
--    player's first failure; wallet.finish_webhook_batch moves the mark
--    past the batch and writes a row only for an event that failed and for
--    the player's later events, queued behind it (and for every event of a
--    player who was already waiting).
-- 3. wallet.claim_webhook_deliveries leases what is due among those rows:
--    the first pending row of each player for each endpoint, skipping rows
--    another sender holds; wallet.record_webhook_attempt records each try:
--    delivered on a 2xx, else tried again after a pause doubling from the
--    first retry to an hour, until the retry period since the event is over
--    (failed; that player's next event goes out). An endpoint that has
--    failed every attempt for the retry period is disabled.
-- A lease outlives the attempts; a sender that dies mid-delivery leaves
-- its batch or row to be sent again when its lease ends, so an event may
-- arrive twice, with the same Wallet-Event-Id, and never not at all.

-- Adds an endpoint receiving `p_types` (or {*}) from the next event on,
-- audited; returns its id.
CREATE OR REPLACE FUNCTION wallet.add_webhook(p_url TEXT, p_types TEXT[], p_secret BYTEA, p_operator TEXT)
RETURNS BIGINT
LANGUAGE plpgsql AS $$
DECLARE
    v_id BIGINT;
BEGIN
    PERFORM wallet.require_text('operator', p_operator);
    INSERT INTO wallet.webhook_endpoints (url, event_types, secret, dispatched_through)
    VALUES (p_url, p_types, p_secret, wallet.events_visible_through())
    RETURNING id INTO v_id;
    INSERT INTO wallet.admin_audit (action, operator, arguments, outcome)
    VALUES ('webhook_add', p_operator, jsonb_build_object('id', v_id, 'url', p_url, 'events', p_types), 'added');
    RETURN v_id;
END;
$$;

-- Enables or disables an endpoint, audited; returns whether it changed
-- (an unknown id raises WL002). A disabled endpoint is given no new
-- deliveries and sends none; enabled again, it receives the events it
-- missed, from where it stopped.
CREATE OR REPLACE FUNCTION wallet.set_webhook_enabled(p_id BIGINT, p_enabled BOOLEAN, p_operator TEXT,
                                                      p_reason TEXT DEFAULT NULL)
RETURNS BOOLEAN
LANGUAGE plpgsql AS $$
DECLARE
    v_was BOOLEAN;
BEGIN
    PERFORM wallet.require_text('operator', p_operator);
    SELECT e.enabled INTO v_was FROM wallet.webhook_endpoints e WHERE e.id = p_id FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no webhook endpoint %', p_id USING ERRCODE = 'WL002';
    END IF;
    UPDATE wallet.webhook_endpoints e
    SET enabled = p_enabled,
        disabled_reason = CASE WHEN p_enabled THEN NULL ELSE coalesce(p_reason, 'disabled by ' || p_operator) END,
        failing_since = CASE WHEN p_enabled THEN NULL ELSE e.failing_since END, updated_at = now()
    WHERE e.id = p_id;
    INSERT INTO wallet.admin_audit (action, operator, reason, arguments, outcome)
    VALUES (CASE WHEN p_enabled THEN 'webhook_enable' ELSE 'webhook_disable' END, p_operator, p_reason,
            jsonb_build_object('id', p_id), CASE WHEN v_was = p_enabled THEN 'unchanged' ELSE 'changed' END);
    RETURN v_was <> p_enabled;
END;
$$;

-- Leases the first enabled endpoint with events after its mark that no
-- other instance holds, until `p_now` + `p_lease_seconds`, and returns its
-- next batch: at most `p_limit` events of its types after the mark (and at
-- most 50,000 ids past it), each with whether its player has a pending row
-- for the endpoint, and `through`, the mark once the batch is done. An
-- endpoint with no event of its types in that stretch has its mark moved
-- at once, and returns nothing.
CREATE OR REPLACE FUNCTION wallet.lease_webhook_batch(p_now TIMESTAMPTZ, p_lease_seconds INTEGER, p_limit INTEGER)
RETURNS TABLE (endpoint_id BIGINT, url TEXT, secret BYTEA, through BIGINT, event_id BIGINT, type TEXT, user_id TEXT,
               currency TEXT, amount BIGINT, balance_after BIGINT, held BIGINT, available BIGINT, entry_id BIGINT,
               hold_id BIGINT, flow_no TEXT, created_at TIMESTAMPTZ, data TEXT, blocked BOOLEAN)
LANGUAGE plpgsql AS $$
DECLARE
    v_visible  BIGINT := wallet.events_visible_through();
    v_endpoint wallet.webhook_endpoints;
    v_upto     BIGINT;
    v_through  BIGINT;
BEGIN
    SELECT * INTO v_endpoint FROM wallet.webhook_endpoints e
    WHERE e.enabled AND e.dispatched_through < v_visible AND (e.leased_until IS NULL OR e.leased_until <= p_now)
    ORDER BY e.id LIMIT 1
    FOR UPDATE SKIP LOCKED;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    v_upto := least(v_visible, v_endpoint.dispatched_through + 50000);
    -- Both bounds are sub-selects, so the plan never rests on a guess of
    -- how many events lie between them from the statistics (new events
    -- always lie past the last ANALYZE and are guessed at a few rows, and
    -- the planner would then read the whole stretch and sort it): it walks
    -- the primary key and stops at the limit.
    SELECT CASE WHEN count(*) = p_limit THEN max(b.id) ELSE v_upto END INTO v_through
    FROM (SELECT v.id FROM wallet.events v
          WHERE v.id > (SELECT v_endpoint.dispatched_through) AND v.id <= (SELECT v_upto)
            AND (v_endpoint.event_types = '{*}' OR v.type = ANY (v_endpoint.event_types))
          ORDER BY v.id LIMIT p_limit) b;
    UPDATE wallet.webhook_endpoints e SET leased_until = p_now + make_interval(secs => p_lease_seconds)
    WHERE e.id = v_endpoint.id;
    RETURN QUERY
    SELECT v_endpoint.id, v_endpoint.url, v_endpoint.secret, v_through, v.id, v.type::TEXT, v.user_id::TEXT,
           v.currency::TEXT, v.amount, v.balance_after, v.held, v.available, v.entry_id, v.hold_id, v.flow_no::TEXT,
           v.created_at, v.data::TEXT,
           EXISTS (SELECT 1 FROM wallet.webhook_deliveries d
                   WHERE d.endpoint_id = v_endpoint.id AND d.user_id = v.user_id AND d.status = 'pending')
    FROM wallet.events v
    WHERE v.id > v_endpoint.dispatched_through AND v.id <= v_through
      AND (v_endpoint.event_types = '{*}' OR v.type = ANY (v_endpoint.event_types))
    ORDER BY v.id;
    IF NOT FOUND THEN
        UPDATE wallet.webhook_endpoints e SET dispatched_through = v_through, leased_until = NULL
        WHERE e.id = v_endpoint.id;
    END IF;
END;
$$;

-- Ends a batch of `p_endpoint_id` at `p_now`: a row for each event that
-- failed (`p_failed_ids`, with its answer's status or NULL and what went
-- wrong), tried again after `p_first_retry_seconds`; a row for each event
-- queued behind one (`p_queued_ids`), due as soon as it is first in line;
-- the mark moved to `p_through`; the lease given back. A batch that
-- delivered something ends the endpoint's failing; one that only failed
-- starts it, and an endpoint failing for `p_retry_hours` is disabled. A
-- batch whose lease ran out and was sent again adds no second row.
CREATE OR REPLACE FUNCTION wallet.finish_webhook_batch(
    p_endpoint_id BIGINT, p_through BIGINT, p_now TIMESTAMPTZ, p_failed_ids BIGINT[], p_failed_statuses INTEGER[],
    p_failed_errors TEXT[], p_queued_ids BIGINT[], p_delivered INTEGER, p_retry_hours INTEGER,
    p_first_retry_seconds INTEGER)
RETURNS VOID
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO wallet.webhook_deliveries (endpoint_id, event_id, user_id, event_created_at, next_attempt_at, attempts,
                                           last_attempt_at, last_status, last_error)
    SELECT p_endpoint_id, v.id, v.user_id, v.created_at, p_now + make_interval(secs => p_first_retry_seconds), 1, p_now,
           f.status, f.error
    FROM unnest(p_failed_ids, p_failed_statuses, p_failed_errors) f (id, status, error)
    JOIN wallet.events v ON v.id = f.id
    ON CONFLICT DO NOTHING;
    INSERT INTO wallet.webhook_deliveries (endpoint_id, event_id, user_id, event_created_at, next_attempt_at)
    SELECT p_endpoint_id, v.id, v.user_id, v.created_at, p_now
    FROM wallet.events v WHERE v.id = ANY (p_queued_ids)
    ON CONFLICT DO NOTHING;
    UPDATE wallet.webhook_endpoints e
    SET dispatched_through = greatest(e.dispatched_through, p_through), leased_until = NULL
    WHERE e.id = p_endpoint_id;
    PERFORM wallet.note_webhook_health(p_endpoint_id, p_delivered > 0, cardinality(p_failed_ids) > 0, p_now,
                                       p_retry_hours);
END;
$$;

-- What attempts at `p_now` say of an endpoint: one delivered ends its
-- failing; failures alone start it (or keep it), and an endpoint failing
-- for `p_retry_hours` is disabled, audited as the service's.
CREATE OR REPLACE FUNCTION wallet.note_webhook_health(
    p_endpoint_id BIGINT, p_delivered BOOLEAN, p_failed BOOLEAN, p_now TIMESTAMPTZ, p_retry_hours INTEGER)
RETURNS VOID
LANGUAGE plpgsql AS $$
DECLARE
    v_failing TIMESTAMPTZ;
BEGIN
    IF p_delivered THEN
        UPDATE wallet.webhook_endpoints e SET failing_since = NULL, last_success_at = p_now WHERE e.id = p_endpoint_id;
    ELSIF p_failed THEN
        UPDATE wallet.webhook_endpoints e SET failing_since = coalesce(e.failing_since, p_now)
        WHERE e.id = p_endpoint_id
        RETURNING e.failing_since INTO v_failing;
        IF v_failing <= p_now - make_interval(hours => p_retry_hours) THEN
            PERFORM wallet.set_webhook_enabled(p_endpoint_id, FALSE, 'wallet',
                                               format('every delivery failed for %s hours', p_retry_hours));
        END IF;
    END IF;
END;
$$;

-- Leases up to `p_limit` due deliveries, each the first pending one of its
-- player for its endpoint, for `p_lease_seconds` from `p_now` (the
-- service's clock); returns them with their endpoint and event (the event's
-- columns NULL when retention deleted it), oldest event first.
CREATE OR REPLACE FUNCTION wallet.claim_webhook_deliveries(p_now TIMESTAMPTZ, p_limit INTEGER, p_lease_seconds INTEGER)
RETURNS TABLE (endpoint_id BIGINT, url TEXT, secret BYTEA, attempts INTEGER, event_id BIGINT, type TEXT,
               user_id TEXT, currency TEXT, amount BIGINT, balance_after BIGINT, held BIGINT, available BIGINT,
               entry_id BIGINT, hold_id BIGINT, flow_no TEXT, created_at TIMESTAMPTZ, data TEXT)
LANGUAGE plpgsql AS $$
BEGIN
    RETURN QUERY
    WITH due AS (
        SELECT d.endpoint_id, d.event_id FROM wallet.webhook_deliveries d
        JOIN wallet.webhook_endpoints e ON e.id = d.endpoint_id AND e.enabled
        WHERE d.status = 'pending' AND d.next_attempt_at <= p_now
          AND (d.leased_until IS NULL OR d.leased_until <= p_now)
          AND NOT EXISTS (SELECT 1 FROM wallet.webhook_deliveries b
                          WHERE b.status = 'pending' AND b.endpoint_id = d.endpoint_id AND b.user_id = d.user_id
                            AND b.event_id < d.event_id)
        ORDER BY d.event_id
        LIMIT p_limit
        FOR UPDATE OF d SKIP LOCKED
    ), leased AS (
        UPDATE wallet.webhook_deliveries d SET leased_until = p_now + make_interval(secs => p_lease_seconds)
        FROM due WHERE d.endpoint_id = due.endpoint_id AND d.event_id = due.event_id
        RETURNING d.endpoint_id, d.event_id, d.attempts
    )
    SELECT l.endpoint_id, e.url, e.secret, l.attempts, l.event_id, v.type::TEXT, v.user_id::TEXT, v.currency::TEXT,
           v.amount, v.balance_after, v.held, v.available, v.entry_id, v.hold_id, v.flow_no::TEXT, v.created_at,
           v.data::TEXT
    FROM leased l
    JOIN wallet.webhook_endpoints e ON e.id = l.endpoint_id
    LEFT JOIN wallet.events v ON v.id = l.event_id
    ORDER BY l.event_id;
END;
$$;

-- Records an attempt at `p_now`: delivered (a 2xx answer), or tried again
-- after a pause doubling from `p_first_retry_seconds` to an hour, or failed
-- once `p_retry_hours` have passed since the event, or at once when
-- `p_give_up` (its event was deleted by retention). An endpoint whose
-- attempts have all failed for `p_retry_hours` is disabled, audited as the
-- service's. Returns the delivery's status ('gone' when it was no longer
-- pending).
CREATE OR REPLACE FUNCTION wallet.record_webhook_attempt(
    p_endpoint_id BIGINT, p_event_id BIGINT, p_delivered BOOLEAN, p_status INTEGER, p_error TEXT, p_now TIMESTAMPTZ,
    p_retry_hours INTEGER, p_first_retry_seconds INTEGER, p_give_up BOOLEAN DEFAULT FALSE)
RETURNS TEXT
LANGUAGE plpgsql AS $$
DECLARE
    v_delivery wallet.webhook_deliveries;
    v_status   TEXT;
BEGIN
    SELECT * INTO v_delivery FROM wallet.webhook_deliveries d
    WHERE d.endpoint_id = p_endpoint_id AND d.event_id = p_event_id AND d.status = 'pending'
    FOR UPDATE;
    IF NOT FOUND THEN
        RETURN 'gone';
    END IF;
    v_status := CASE WHEN p_delivered THEN 'delivered'
                     WHEN p_give_up OR p_now >= v_delivery.event_created_at + make_interval(hours => p_retry_hours)
                     THEN 'failed'
                     ELSE 'pending' END;
    UPDATE wallet.webhook_deliveries d
    SET attempts = d.attempts + 1, last_attempt_at = p_now, last_status = p_status, last_error = p_error,
        leased_until = NULL, status = v_status,
        next_attempt_at = p_now + make_interval(secs => least(3600, p_first_retry_seconds * 2 ^ least(d.attempts, 20))),
        finished_at = CASE WHEN v_status <> 'pending' THEN p_now END
    WHERE d.endpoint_id = p_endpoint_id AND d.event_id = p_event_id;
    PERFORM wallet.note_webhook_health(p_endpoint_id, p_delivered, NOT p_delivered AND NOT p_give_up, p_now,
                                       p_retry_hours);
    RETURN v_status;
END;
$$;

-- Per endpoint: whether it is enabled, its pending deliveries, and the age
-- at `p_now` of the oldest event it has not yet received (0 when none),
-- counting events not yet dispatched to it; for /metrics and the console.
CREATE OR REPLACE FUNCTION wallet.webhook_backlog(p_now TIMESTAMPTZ)
RETURNS TABLE (endpoint_id BIGINT, url TEXT, enabled BOOLEAN, pending BIGINT, oldest_seconds DOUBLE PRECISION,
               failing_since TIMESTAMPTZ, disabled_reason TEXT)
LANGUAGE sql STABLE AS $$
    SELECT e.id, e.url, e.enabled,
           (SELECT count(*) FROM wallet.webhook_deliveries d WHERE d.endpoint_id = e.id AND d.status = 'pending'),
           greatest(0, extract(epoch FROM p_now - least(
               (SELECT min(d.event_created_at) FROM wallet.webhook_deliveries d
                WHERE d.endpoint_id = e.id AND d.status = 'pending'),
               (SELECT v.created_at FROM wallet.events v WHERE v.id > e.dispatched_through
                  AND (e.event_types = '{*}' OR v.type = ANY (e.event_types))
                ORDER BY v.id LIMIT 1))))::DOUBLE PRECISION,
           e.failing_since, e.disabled_reason
    FROM wallet.webhook_endpoints e
    ORDER BY e.id;
$$;

-- Deletes finished deliveries older than `p_before`, at most `p_limit`;
-- returns how many went.
CREATE OR REPLACE FUNCTION wallet.purge_webhook_deliveries(p_before TIMESTAMPTZ, p_limit INTEGER) RETURNS INTEGER
LANGUAGE sql AS $$
    WITH doomed AS (
        SELECT d.endpoint_id, d.event_id FROM wallet.webhook_deliveries d
        WHERE d.status <> 'pending' AND d.finished_at < p_before
        LIMIT p_limit
    ), deleted AS (
        DELETE FROM wallet.webhook_deliveries d USING doomed x
        WHERE d.endpoint_id = x.endpoint_id AND d.event_id = x.event_id
        RETURNING 1
    )
    SELECT count(*)::INTEGER FROM deleted;
$$;
