-- Hold operations go to the group-commit writers with credits and debits,
-- and a writer sends all of a batch's hold operations in one call,
-- wallet.hold_many (Migrations/functions/07_holds.sql), one of these each.
CREATE TYPE wallet.hold_request AS (
    -- place, capture or release.
    kind               TEXT,
    client             TEXT,
    key                TEXT,
    request_hash       BYTEA,
    request_id         TEXT,
    -- An admin key acts on any client's holds.
    any_client         BOOLEAN,
    -- place: the wallet, the amount, why, and for how long.
    user_id            TEXT,
    currency           TEXT,
    amount             BIGINT,
    reason             TEXT,
    metadata           JSONB,
    expires_in_seconds INTEGER,
    -- capture and release: the hold (and a capture's amount, NULL for all).
    hold_id            BIGINT
);
