-- API keys. Only a SHA-256 hash of each secret is stored; the secret is
-- shown once, when the key is made.
CREATE TABLE wallet.api_keys (
    id           BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name         TEXT NOT NULL CHECK (name ~ '^[A-Za-z0-9._-]{1,64}$'),
    key_hash     BYTEA NOT NULL UNIQUE CHECK (length(key_hash) = 32),
    scopes       TEXT[] NOT NULL CHECK (cardinality(scopes) > 0
                                        AND scopes <@ ARRAY['credit', 'debit', 'read', 'admin']),
    created_at   TIMESTAMPTZ NOT NULL DEFAULT now(),
    last_used_at TIMESTAMPTZ,
    revoked_at   TIMESTAMPTZ
);
-- A name belongs to one live key at a time; revoked keys stay for the record.
CREATE UNIQUE INDEX api_keys_live_name ON wallet.api_keys (name) WHERE revoked_at IS NULL;

-- The live key with this hash, if any. Marks it used, at most once a minute,
-- so authentication does not turn every request into a write.
CREATE FUNCTION wallet.authenticate(p_key_hash BYTEA)
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
