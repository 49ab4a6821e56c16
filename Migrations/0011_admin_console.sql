-- The support console (/admin): its sign-in sessions, the refused App Store
-- notifications it shows, revoking a key with an audit row, and the indexes
-- its pages read by.

-- A console session. The browser holds a random id; only its SHA-256 is
-- stored, so a copy of this table signs no one in. A session ends at
-- expires_at, at sign-out (ended_at), or as soon as its key is revoked or
-- loses the admin scope (every request checks the key).
CREATE TABLE wallet.admin_sessions (
    id_hash    BYTEA PRIMARY KEY CHECK (length(id_hash) = 32),
    key_id     BIGINT NOT NULL REFERENCES wallet.api_keys (id),
    -- The token every state-changing form of this session carries.
    csrf_token TEXT NOT NULL CHECK (length(csrf_token) BETWEEN 32 AND 64),
    created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    expires_at TIMESTAMPTZ NOT NULL,
    ended_at   TIMESTAMPTZ,
    CONSTRAINT admin_sessions_lifetime CHECK (expires_at > created_at)
);
-- For removing sessions long over.
CREATE INDEX admin_sessions_expires ON wallet.admin_sessions (expires_at);

-- App Store notifications refused before they were applied (a bad
-- signature, another bundle, a body that is not a notification), with why.
-- Their payload is not kept: nothing in it was vouched for. Bounded to the
-- newest 10,000 rows by wallet.record_refused_notification.
CREATE TABLE wallet.appstore_refused_notifications (
    id          BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    reason      TEXT NOT NULL CHECK (length(reason) BETWEEN 1 AND 64),
    request_id  TEXT CHECK (length(request_id) <= 200),
    received_at TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX appstore_refused_notifications_received ON wallet.appstore_refused_notifications (received_at);

CREATE FUNCTION wallet.record_refused_notification(p_reason TEXT, p_request_id TEXT) RETURNS void
LANGUAGE sql AS $$
    WITH added AS (
        INSERT INTO wallet.appstore_refused_notifications (reason, request_id)
        VALUES (p_reason, p_request_id) RETURNING id
    )
    DELETE FROM wallet.appstore_refused_notifications
    WHERE id <= (SELECT id FROM added) - 10000;
$$;

-- Revoking an API key from the console is audited with the operator's key.
ALTER TABLE wallet.admin_audit DROP CONSTRAINT admin_audit_action_check;
ALTER TABLE wallet.admin_audit ADD CONSTRAINT admin_audit_action_check
    CHECK (action IN ('refund', 'grant', 'revoke', 'product', 'release_hold', 'revoke_key'));

-- Revokes the live key named p_name and audits it; returns whether there
-- was one.
CREATE FUNCTION wallet.revoke_api_key(p_name TEXT, p_operator TEXT, p_reason TEXT) RETURNS BOOLEAN
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

-- The console's reads. A user's credits; credits, entries and
-- notifications by time (BRIN: rows arrive in time order, so the index
-- costs next to nothing per insert); audit rows by the user or flowNO they
-- name.
CREATE INDEX credits_user ON wallet.credits (user_id, created_at);
CREATE INDEX credits_created ON wallet.credits USING brin (created_at);
CREATE INDEX entries_created ON wallet.entries USING brin (created_at);
CREATE INDEX appstore_notifications_received ON wallet.appstore_notifications USING brin (received_at);
CREATE INDEX admin_audit_user ON wallet.admin_audit ((arguments ->> 'user_id')) WHERE arguments ? 'user_id';
CREATE INDEX admin_audit_flow_no ON wallet.admin_audit ((arguments ->> 'flow_no')) WHERE arguments ? 'flow_no';
