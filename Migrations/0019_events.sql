-- Events: every change to a wallet, appended by wallet.post_entries in the
-- transaction that makes the change (Migrations/functions/11_post_entries.sql),
-- so an event exists if and only if its change committed. Read in id order
-- through GET /v1/events and delivered to webhooks.

CREATE SEQUENCE wallet.events_id_seq AS BIGINT;

-- One change to one wallet. `amount` is what the change added to the
-- balance (negative when it took; 0 for what moves only held coins, and for
-- balance.negative, which stands beside the event that caused it), so a
-- wallet's amounts sum to its balance. balance_after, held and available
-- are the wallet's once the change is applied.
CREATE TABLE wallet.events (
    id            BIGINT PRIMARY KEY,
    type          TEXT COLLATE "C" NOT NULL,
    user_id       TEXT COLLATE "C" NOT NULL,
    currency      TEXT COLLATE "C" NOT NULL,
    amount        BIGINT NOT NULL,
    balance_after BIGINT NOT NULL,
    held          BIGINT NOT NULL,
    available     BIGINT NOT NULL,
    entry_id      BIGINT,
    hold_id       BIGINT,
    flow_no       TEXT COLLATE "C",
    created_at    TIMESTAMPTZ NOT NULL,
    data          JSONB NOT NULL DEFAULT '{}',
    CONSTRAINT events_type CHECK (type IN (
        'credit.created', 'credit.refunded', 'credit.refund_reversed', 'debit.created',
        'hold.placed', 'hold.captured', 'hold.released', 'hold.expired',
        'grant.created', 'revoke.created', 'balance.negative')),
    CONSTRAINT events_available CHECK (available = balance_after - held),
    CONSTRAINT events_data CHECK (jsonb_typeof(data) = 'object')
);
ALTER SEQUENCE wallet.events_id_seq OWNED BY wallet.events.id;

-- A player's events, in order (the feed's user_id filter, the console).
CREATE INDEX events_user ON wallet.events (user_id, id);

-- Through which id events were deleted for retention (wallet.purge_events):
-- a cursor below it asks for events that are gone.
CREATE TABLE wallet.events_horizon (
    only_row       BOOLEAN PRIMARY KEY DEFAULT TRUE CHECK (only_row),
    purged_through BIGINT NOT NULL DEFAULT 0 CHECK (purged_through >= 0)
);
INSERT INTO wallet.events_horizon DEFAULT VALUES;

-- Events are never changed, and deleted only by wallet.purge_events: its
-- guard and triggers are in Migrations/functions/13_table_guards.sql.

-- A posting says which event it is, and may move held coins: placing,
-- releasing and expiring a hold post through wallet.post_entries too, with
-- no ledger entry (their `kind` is NULL), so every change to a wallet's
-- balance or held coins is made, and told, in one place.
ALTER TYPE wallet.posting
    ADD ATTRIBUTE held BIGINT,
    ADD ATTRIBUTE event TEXT,
    ADD ATTRIBUTE hold_id BIGINT,
    ADD ATTRIBUTE flow_no TEXT,
    ADD ATTRIBUTE data JSONB;

-- Functions whose arguments change (their new forms are in the function
-- files), and one no longer needed: expiry goes through
-- wallet.lock_batch_wallets and wallet.post_entries.
DROP FUNCTION IF EXISTS wallet.new_posting(TEXT, TEXT, TEXT, BIGINT, TEXT, TEXT, JSONB);
DROP FUNCTION IF EXISTS wallet.write_hold_batch(wallet.hold_request[], wallet.hold_result[], wallet.holds[], INTEGER[],
                                                wallet.batch_wallet[], wallet.entries[], INTEGER[]);
DROP FUNCTION IF EXISTS wallet.expire_due_holds(TEXT, TEXT);

-- The events scope: reads the feed.
ALTER TABLE wallet.api_keys DROP CONSTRAINT api_keys_scopes_check;
ALTER TABLE wallet.api_keys ADD CONSTRAINT api_keys_scopes_check
    CHECK (cardinality(scopes) > 0 AND scopes <@ ARRAY['credit', 'debit', 'read', 'events', 'console', 'admin']);
