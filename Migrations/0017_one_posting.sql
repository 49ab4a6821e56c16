-- Money moves in one place, and hold answers are typed.
--
-- Every ledger entry and every balance change is written by one function,
-- wallet.post_entries (Migrations/functions/11_post_entries.sql), from typed
-- postings: credits, debits, captures, refunds, reversals, grants and
-- revokes post through it. Every function lives in a function file now
-- (grants, revokes and reversals, the report, the keys' and the tables'
-- helpers, until now in migrations, included); this migration only
-- changes types and constraints and drops what the files no longer define.

-- One movement of coins in one wallet: a ledger entry to append, with its
-- signed amount (entries_sign says which kinds add and which take).
CREATE TYPE wallet.posting AS (
    user_id   TEXT,
    currency  TEXT,
    kind      TEXT,
    amount    BIGINT,
    reference TEXT,
    client    TEXT,
    metadata  JSONB
);

-- One credit, with its Google Play purchase token (NULL for the other
-- stores): one composite per operation, no array beside it. The previous
-- release calls credit_many with wallet.credit_request and a parallel array
-- of tokens; those forms stay, as wrappers, while its instances run.
CREATE TYPE wallet.credit_operation AS (
    client         TEXT,
    flow_no        TEXT,
    user_id        TEXT,
    product_id     TEXT,
    quantity       INTEGER,
    -- The amount the caller claimed, if any: checked, never used.
    claimed_amount BIGINT,
    source         TEXT,
    environment    TEXT,
    purchase_token TEXT
);

-- What credit_many reads about one operation before it decides: the credit
-- already committed under its flowNO, its product (when active), the
-- refusal that does not depend on batch order (if any), the wallet it
-- touches, and the first operation of the batch with its flowNO.
CREATE TYPE wallet.credit_state AS (
    credit  wallet.credits,
    product wallet.products,
    refusal TEXT,
    wallet  wallet.wallet_key,
    first   INTEGER
);

-- What debit_many reads about one request before it decides: the outcome
-- stored under its key, the first request of the batch with its key, and
-- whether a product of the catalog uses its currency.
CREATE TYPE wallet.debit_state AS (
    stored         wallet.idempotency_keys,
    first          INTEGER,
    currency_known BOOLEAN
);

-- Functions of the previous release's files that none of this release's
-- define (IF EXISTS: on a new database the files have not run yet).
--
-- The batch functions' last step before postings: replaced by
-- wallet.post_entries.
DROP FUNCTION IF EXISTS wallet.finish_batch(TEXT, INTEGER, INTEGER, wallet.batch_wallet[], wallet.entries[]);

-- Holds answer in typed columns, as debits do. The functions that built
-- their answers as JSON, and the advisory lock that kept one key's
-- operations apart (the key's primary key does that now), go; the functions
-- that take their place are in Migrations/functions/07_holds.sql, taking
-- one wallet.hold_request each.
DROP FUNCTION IF EXISTS wallet.hold_many(wallet.hold_request[]);
DROP FUNCTION IF EXISTS wallet.place_hold(TEXT, TEXT, BYTEA, TEXT, TEXT, TEXT, BIGINT, TEXT, JSONB, INTEGER);
DROP FUNCTION IF EXISTS wallet.capture_hold(TEXT, TEXT, BYTEA, TEXT, BIGINT, BIGINT, BOOLEAN);
DROP FUNCTION IF EXISTS wallet.release_hold(TEXT, TEXT, BYTEA, TEXT, BIGINT, BOOLEAN, TEXT);
DROP FUNCTION IF EXISTS wallet.hold_key_outcome(TEXT, TEXT, BYTEA);
DROP FUNCTION IF EXISTS wallet.store_hold_outcome(TEXT, TEXT, BYTEA, TEXT, TEXT, JSONB, BIGINT, BIGINT, BIGINT, BIGINT, BIGINT);
DROP FUNCTION IF EXISTS wallet.hold_json(wallet.holds);
DROP FUNCTION IF EXISTS wallet.balance_json(TEXT, TEXT, BIGINT, BIGINT);
DROP TYPE wallet.hold_result;

-- The answer of a hold operation, from which the service writes the body:
-- the hold as the answer shows it, and the wallet's balance and active
-- holds then. `replayed`: the answer comes from an earlier request with the
-- same key, first answered to `request_id`. `stored_response`: a hold,
-- capture or release answered by the previous release, whose body was
-- stored whole and is replayed as it was first sent.
CREATE TYPE wallet.hold_result AS (
    outcome         TEXT,
    replayed        BOOLEAN,
    request_id      TEXT,
    hold            wallet.holds,
    balance         BIGINT,
    held            BIGINT,
    stored_response JSONB
);

-- A release names its reason in the request's `reason` (an operator's,
-- through wallet.admin_release_hold; the API gives none).
COMMENT ON COLUMN wallet.hold_request.reason IS 'place: why the coins are held; release: why they are released';

-- What the previous release stored under idempotency keys stays as it is.
-- Its holds, captures and releases kept their answer's body, replayed as
-- first sent; its refusals (insufficient_funds, hold_not_active,
-- amount_exceeds_hold) kept one too, but every value in it is in typed
-- columns as well (the balance and held the answer gave, and the hold,
-- whose status and amount no longer change once it is not held), and they
-- are rebuilt from those, as this release's are. Every hold answer names
-- its hold, but a placement refused for insufficient funds.
ALTER TABLE wallet.idempotency_keys ADD CONSTRAINT idempotency_keys_hold_answer
    CHECK (outcome NOT IN ('held', 'captured', 'released', 'hold_not_active', 'amount_exceeds_hold') OR hold_id IS NOT NULL);

-- wallet.apply_appstore_notification queues Apple's consumption answer
-- itself, by the rules that were the service's (Apple's 12-hour window, a
-- consumable, a known environment), and says whether it did
-- (Migrations/functions/03_apply_appstore_notification.sql). Its
-- ten-argument form stays for the previous release's instances, which
-- queue the answer themselves.
