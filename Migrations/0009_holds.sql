-- Holds: coins reserved now and captured (debited) or released later, or
-- left to expire. The functions that place, capture, release and expire
-- them live in Migrations/functions/07_holds.sql.
--
-- A wallet's `held` is the sum of its holds whose status is `held`. A hold
-- past its expires_at still counts there until it is expired, which happens
-- under its wallet's row lock whenever the wallet is written, and in the
-- sweeper; everything that decides on `available` expires first, and reads
-- count only holds not yet past expires_at.

ALTER TABLE wallet.wallets ADD COLUMN held BIGINT NOT NULL DEFAULT 0 CHECK (held >= 0);

CREATE TABLE wallet.holds (
    id              BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    -- The API client that placed it; only it (or an admin key) may act on it.
    client          TEXT COLLATE "C" NOT NULL,
    user_id         TEXT COLLATE "C" NOT NULL,
    currency        TEXT COLLATE "C" NOT NULL,
    amount          BIGINT NOT NULL CHECK (amount BETWEEN 1 AND 1000000000000),
    status          TEXT NOT NULL DEFAULT 'held' CHECK (status IN ('held', 'captured', 'released', 'expired')),
    reason          TEXT,
    metadata        JSONB,
    expires_at      TIMESTAMPTZ NOT NULL,
    created_at      TIMESTAMPTZ NOT NULL DEFAULT now(),
    captured_amount BIGINT CHECK (captured_amount BETWEEN 1 AND amount),
    captured_at     TIMESTAMPTZ,
    -- The capture's debit entry.
    entry_id        BIGINT UNIQUE,
    released_at     TIMESTAMPTZ,
    release_reason  TEXT,
    expired_at      TIMESTAMPTZ,
    FOREIGN KEY (user_id, currency) REFERENCES wallet.wallets (user_id, currency),
    CONSTRAINT holds_lifecycle CHECK (
        CASE status
            WHEN 'held' THEN num_nonnulls(captured_amount, captured_at, entry_id, released_at, expired_at) = 0
            WHEN 'captured' THEN num_nonnulls(captured_amount, captured_at, entry_id) = 3
                                 AND num_nonnulls(released_at, expired_at) = 0
            WHEN 'released' THEN released_at IS NOT NULL
                                 AND num_nonnulls(captured_amount, captured_at, entry_id, expired_at) = 0
            ELSE expired_at IS NOT NULL AND num_nonnulls(captured_amount, captured_at, entry_id, released_at) = 0
        END)
);
-- A wallet's active holds, and the sweeper's due ones.
CREATE INDEX holds_active ON wallet.holds (user_id, currency) WHERE status = 'held';
CREATE INDEX holds_due ON wallet.holds (expires_at) WHERE status = 'held';

-- Kept for good, and only a `held` hold changes, once.
CREATE FUNCTION wallet.holds_guard() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'UPDATE' AND OLD.status = 'held' AND NEW.status <> 'held'
       AND (NEW.id, NEW.client, NEW.user_id, NEW.currency, NEW.amount, NEW.expires_at, NEW.created_at)
           IS NOT DISTINCT FROM (OLD.id, OLD.client, OLD.user_id, OLD.currency, OLD.amount, OLD.expires_at, OLD.created_at)
    THEN
        RETURN NEW;
    END IF;
    RAISE EXCEPTION 'a hold changes only from held, once' USING ERRCODE = 'WL001';
END;
$$;
CREATE TRIGGER holds_kept BEFORE UPDATE OR DELETE ON wallet.holds
    FOR EACH ROW EXECUTE FUNCTION wallet.holds_guard();
CREATE TRIGGER holds_no_truncate BEFORE TRUNCATE ON wallet.holds
    FOR EACH STATEMENT EXECUTE FUNCTION wallet.refuse_change();

-- Hold operations keep their outcomes under the same idempotency keys as
-- debits, with the answer's body (they are not on the hot path, so it is
-- built once in SQL and replayed as stored).
-- `held`: the wallet's active holds when the answer was given (a debit's
-- replay repeats it; NULL before this release, when there were none).
ALTER TABLE wallet.idempotency_keys ADD COLUMN hold_id BIGINT, ADD COLUMN held BIGINT;
ALTER TABLE wallet.idempotency_keys DROP CONSTRAINT idempotency_keys_outcome_check;
ALTER TABLE wallet.idempotency_keys ADD CONSTRAINT idempotency_keys_outcome_check
    CHECK (outcome IN ('debited', 'insufficient_funds', 'held', 'captured', 'released', 'hold_not_active',
                       'amount_exceeds_hold'));
ALTER TABLE wallet.idempotency_keys DROP CONSTRAINT idempotency_keys_legacy_answer;
ALTER TABLE wallet.idempotency_keys ADD CONSTRAINT idempotency_keys_stored_answer
    CHECK (response IS NULL OR outcome = 'debited' OR hold_id IS NOT NULL OR outcome = 'insufficient_funds');
ALTER TABLE wallet.idempotency_keys DROP CONSTRAINT idempotency_keys_entry;
ALTER TABLE wallet.idempotency_keys ADD CONSTRAINT idempotency_keys_entry
    CHECK ((outcome IN ('debited', 'captured')) = (entry_id IS NOT NULL));

-- What the balance objects of credits and debits now carry: the wallet's
-- active holds, so the answer can say what is available.
ALTER TYPE wallet.batch_wallet ADD ATTRIBUTE held BIGINT;
ALTER TYPE wallet.credit_result ADD ATTRIBUTE held BIGINT;
ALTER TYPE wallet.debit_result ADD ATTRIBUTE held BIGINT;

-- An operator's release of a hold (Scripts/admin/holds.sql) is audited.
ALTER TABLE wallet.admin_audit DROP CONSTRAINT admin_audit_action_check;
ALTER TABLE wallet.admin_audit ADD CONSTRAINT admin_audit_action_check
    CHECK (action IN ('refund', 'grant', 'revoke', 'product', 'release_hold'));

-- The answer of a hold operation.
CREATE TYPE wallet.hold_result AS (
    outcome    TEXT,
    -- The answer comes from an earlier request with the same key.
    replayed   BOOLEAN,
    -- The answer's body, as stored under the key.
    response   JSONB,
    request_id TEXT
);
