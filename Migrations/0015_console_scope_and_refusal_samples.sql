-- The console scope: a key for support agents that signs in to /admin and
-- opens no /v1 route.
ALTER TABLE wallet.api_keys DROP CONSTRAINT api_keys_scopes_check;
ALTER TABLE wallet.api_keys ADD CONSTRAINT api_keys_scopes_check
    CHECK (cardinality(scopes) > 0 AND scopes <@ ARRAY['credit', 'debit', 'read', 'console', 'admin']);

-- Refused App Store notifications. Anyone can post junk to the endpoint, so
-- a refusal of a token Apple did not sign (or of a body that is not a
-- notification) is kept at most once a second per reason, in a row that
-- stands for the refusals since the previous one (refusals), and with
-- nothing the client chose: request_id is no longer written. A refusal of a
-- token Apple signed (apple_signed: another bundle, environment or app) is
-- kept every time. Each kind keeps its own newest 10,000 rows, so junk
-- cannot push out the refusals that say the service is set up wrong;
-- kind_seq numbers a kind's rows, so the trim is a range, not a count.
CREATE SEQUENCE wallet.appstore_refused_signed_seq;
CREATE SEQUENCE wallet.appstore_refused_unsigned_seq;
ALTER TABLE wallet.appstore_refused_notifications
    ADD COLUMN apple_signed BOOLEAN NOT NULL DEFAULT false,
    ADD COLUMN refusals INTEGER NOT NULL DEFAULT 1 CHECK (refusals >= 1),
    ADD COLUMN kind_seq BIGINT;
-- Rows from before: only these reasons come after the signature and chain.
UPDATE wallet.appstore_refused_notifications SET apple_signed = true
WHERE reason IN ('bundle_mismatch', 'environment_not_allowed');
UPDATE wallet.appstore_refused_notifications r SET kind_seq = n.position
FROM (SELECT id, row_number() OVER (PARTITION BY apple_signed ORDER BY id) AS position
      FROM wallet.appstore_refused_notifications) n
WHERE r.id = n.id;
SELECT setval('wallet.appstore_refused_signed_seq', coalesce(max(kind_seq), 0) + 1, false)
FROM wallet.appstore_refused_notifications WHERE apple_signed;
SELECT setval('wallet.appstore_refused_unsigned_seq', coalesce(max(kind_seq), 0) + 1, false)
FROM wallet.appstore_refused_notifications WHERE NOT apple_signed;
ALTER TABLE wallet.appstore_refused_notifications
    ALTER COLUMN apple_signed DROP DEFAULT,
    ALTER COLUMN kind_seq SET NOT NULL;
CREATE INDEX appstore_refused_notifications_kind ON wallet.appstore_refused_notifications (apple_signed, kind_seq);

DROP FUNCTION wallet.record_refused_notification(TEXT, TEXT);

-- Keeps one row and trims its kind to the newest 10,000.
CREATE FUNCTION wallet.record_refused_notification(p_reason TEXT, p_apple_signed BOOLEAN, p_refusals INTEGER)
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
