-- Money moves in one place.
--
-- Ledger entries and balance changes are written by one function,
-- wallet.post_entries (Migrations/functions/11_post_entries.sql), from typed
-- postings: credits, debits, refunds, reversals, grants and revokes post
-- through it. The functions that move money live in function files (grants,
-- revokes and reversals, until now in 0003, included); this migration only
-- adds the types they take and drops what the files no longer define.

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
