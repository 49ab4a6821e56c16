-- The key the support console signs its session cookies with, so that a
-- cookie it never issued is turned away before any database work. The
-- first instance to start makes it (32 CSPRNG bytes) and every instance
-- reads the same row, so each accepts the others' cookies.
--
-- It is a filter, not a credential: a cookie with a good signature still
-- needs a live session in wallet.admin_sessions, whose ids are stored only
-- as hashes, so a copy of this row signs no one in. Deleting it (and
-- restarting every instance) makes a new one and signs everyone out.
CREATE TABLE wallet.console_cookie_keys (
    name       TEXT PRIMARY KEY CHECK (name = 'session'),
    key        BYTEA NOT NULL CHECK (length(key) = 32),
    created_at TIMESTAMPTZ NOT NULL DEFAULT now()
);
