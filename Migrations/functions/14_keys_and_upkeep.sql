-- API keys, the idempotency records' purge and the refused notifications'
-- samples, re-applied by the migrator whenever this file changes (first
-- defined in 0004_api_keys.sql, 0002_credits_and_debits.sql,
-- 0011_admin_console.sql and 0015_console_scope_and_refusal_samples.sql).

-- The live key with this hash, if any. Marks it used, at most once a minute,
-- so authentication does not turn every request into a write.
CREATE OR REPLACE FUNCTION wallet.authenticate(p_key_hash BYTEA)
RETURNS TABLE (name TEXT, scopes TEXT[], key_hash BYTEA)
LANGUAGE sql AS $$
    WITH found AS (
        SELECT k.id, k.name, k.scopes, k.key_hash, k.last_used_at
        FROM wallet.api_keys k
        WHERE k.key_hash = p_key_hash AND k.revoked_at IS NULL
    ), touched AS (
        UPDATE wallet.api_keys k SET last_used_at = now()
        FROM found f
        WHERE k.id = f.id AND (f.last_used_at IS NULL OR f.last_used_at < now() - INTERVAL '1 minute')
    )
    SELECT f.name, f.scopes, f.key_hash FROM found f;
$$;

-- Revokes the live key named p_name and audits it; returns whether there
-- was one. Its console sessions end with it.
CREATE OR REPLACE FUNCTION wallet.revoke_api_key(p_name TEXT, p_operator TEXT, p_reason TEXT) RETURNS BOOLEAN
LANGUAGE plpgsql AS $$
DECLARE
    v_id BIGINT;
BEGIN
    PERFORM wallet.require_text('operator', p_operator);
    UPDATE wallet.api_keys SET revoked_at = now()
    WHERE name = p_name AND revoked_at IS NULL
    RETURNING id INTO v_id;
    IF v_id IS NULL THEN
        RETURN FALSE;
    END IF;
    UPDATE wallet.admin_sessions SET ended_at = now() WHERE key_id = v_id AND ended_at IS NULL;
    INSERT INTO wallet.admin_audit (action, operator, reason, arguments, outcome)
    VALUES ('revoke_key', p_operator, p_reason, jsonb_build_object('key', p_name), 'revoked');
    RETURN TRUE;
END;
$$;

-- Deletes idempotency records older than `p_before`, at most `p_limit` of
-- them, and says how many went. The service calls it in small rounds.
CREATE OR REPLACE FUNCTION wallet.purge_idempotency_keys(p_before TIMESTAMPTZ, p_limit INTEGER) RETURNS INTEGER
LANGUAGE sql AS $$
    WITH doomed AS (
        SELECT k.client, k.key FROM wallet.idempotency_keys k
        WHERE k.created_at < p_before
        LIMIT p_limit
        FOR UPDATE SKIP LOCKED
    ), deleted AS (
        DELETE FROM wallet.idempotency_keys k USING doomed d
        WHERE k.client = d.client AND k.key = d.key
        RETURNING 1
    )
    SELECT count(*)::INTEGER FROM deleted;
$$;

-- Keeps one row that stands for `p_refusals` refused App Store
-- notifications and trims its kind (Apple-signed or not) to the newest
-- 10,000.
CREATE OR REPLACE FUNCTION wallet.record_refused_notification(p_reason TEXT, p_apple_signed BOOLEAN, p_refusals INTEGER)
RETURNS void
LANGUAGE sql AS $$
    WITH added AS (
        INSERT INTO wallet.appstore_refused_notifications (reason, apple_signed, refusals, kind_seq)
        VALUES (p_reason, p_apple_signed, p_refusals,
                nextval(CASE WHEN p_apple_signed THEN 'wallet.appstore_refused_signed_seq'
                             ELSE 'wallet.appstore_refused_unsigned_seq' END::regclass))
        RETURNING kind_seq
    )
    DELETE FROM wallet.appstore_refused_notifications
    WHERE apple_signed = p_apple_signed AND kind_seq <= (SELECT kind_seq FROM added) - 10000;
$$;

-- Deletes events created before `p_before`, oldest first, at most
-- `p_limit` of them, and says how many went. Only a run of ids from the
-- oldest goes, and only ids the feed can see (wallet.events_visible_through:
-- below it, every event that will exist has committed), so an event is
-- never deleted while one before it may still come; the horizon records the
-- last id deleted, and a cursor below it is expired. Nor does an event go
-- before the console's rollups have taken it (wallet.roll_up_console, in
-- 20_console_rollups.sql): their watermark only rises, so the one read here
-- may be behind, never ahead.
CREATE OR REPLACE FUNCTION wallet.purge_events(p_before TIMESTAMPTZ, p_limit INTEGER) RETURNS INTEGER
LANGUAGE plpgsql AS $$
DECLARE
    v_visible BIGINT := least(wallet.events_visible_through(),
                              (SELECT s.rolled_through FROM wallet.console_rollup_state s));
    v_through BIGINT;
    v_count   INTEGER;
BEGIN
    SELECT max(f.id) INTO v_through
    FROM (SELECT e.id, bool_and(e.created_at < p_before) OVER (ORDER BY e.id) AS old
          FROM (SELECT e.id, e.created_at FROM wallet.events e WHERE e.id <= v_visible
                ORDER BY e.id LIMIT p_limit) e) f
    WHERE f.old;
    IF v_through IS NULL THEN
        RETURN 0;
    END IF;
    -- One purge at a time: the horizon's row is the lock.
    UPDATE wallet.events_horizon SET purged_through = greatest(purged_through, v_through);
    PERFORM set_config('wallet.purging_events', 'on', TRUE);
    DELETE FROM wallet.events e WHERE e.id <= v_through;
    GET DIAGNOSTICS v_count = ROW_COUNT;
    PERFORM set_config('wallet.purging_events', 'off', TRUE);
    RETURN v_count;
END;
$$;
