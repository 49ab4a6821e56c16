-- The rest of a game's economy: bonus coins a product adds to a purchase,
-- rewards the game server grants under an idempotency key, currencies
-- that only purchases may make, and what a refund does when the coins it
-- takes back are gone.

-- A paid currency is one that only purchases make (gems bought with
-- money): the game server may not grant it (paid_currency_not_grantable).
-- Every currency is grantable until an admin says otherwise
-- (Scripts/admin/currency.sql -v paid=true); its purchases are paid lots
-- whatever the flag, and its grants and bonuses free ones.
ALTER TABLE wallet.currencies ADD COLUMN paid BOOLEAN NOT NULL DEFAULT FALSE;

-- A product's bonus: `amount` free coins of `currency` added to each unit
-- bought, expiring `expires_in_days` after the credit (never, when NULL).
-- Past credits keep the bonus they got; a change applies to later ones.
CREATE TABLE wallet.product_bonuses (
    product_id      TEXT COLLATE "C" PRIMARY KEY REFERENCES wallet.products (product_id),
    currency        TEXT COLLATE "C" NOT NULL REFERENCES wallet.currencies (code),
    amount          BIGINT NOT NULL CHECK (amount BETWEEN 1 AND 1000000000000),
    expires_in_days INTEGER CHECK (expires_in_days BETWEEN 1 AND 3650),
    updated_at      TIMESTAMPTZ NOT NULL DEFAULT now()
);

-- What wallet.credit_many reads about an operation gains its product's
-- bonus.
ALTER TYPE wallet.credit_state ADD ATTRIBUTE bonus wallet.product_bonuses;

-- A new kind of entry, `bonus`: a product's bonus coins, under the flowNO
-- of the credit that brought them (event `bonus.created`). A refund, and
-- its reversal, may move nothing: under WALLET_REFUND_DEBT=floor a refund
-- of a wallet that holds nothing takes nothing, and the reversal of such a
-- refund gives nothing back, but both are still the credit's history.
ALTER TABLE wallet.entries DROP CONSTRAINT entries_kind, DROP CONSTRAINT entries_sign;
ALTER TABLE wallet.entries
    ADD CONSTRAINT entries_kind CHECK (
        kind IN ('credit', 'debit', 'refund', 'refund_reversal', 'grant', 'revoke', 'expire', 'bonus')) NOT VALID,
    ADD CONSTRAINT entries_sign CHECK (
        CASE WHEN kind IN ('credit', 'grant', 'bonus') THEN amount > 0
             WHEN kind = 'refund_reversal' THEN amount >= 0
             WHEN kind = 'refund' THEN amount <= 0
             ELSE amount < 0 END) NOT VALID;
ALTER TABLE wallet.entries VALIDATE CONSTRAINT entries_kind;
ALTER TABLE wallet.entries VALIDATE CONSTRAINT entries_sign;

ALTER TABLE wallet.events DROP CONSTRAINT events_type;
ALTER TABLE wallet.events ADD CONSTRAINT events_type CHECK (type IN (
    'credit.created', 'credit.refunded', 'credit.refund_reversed', 'debit.created',
    'hold.placed', 'hold.captured', 'hold.released', 'hold.expired',
    'grant.created', 'revoke.created', 'balance.negative', 'coins.expired', 'bonus.created')) NOT VALID;
ALTER TABLE wallet.events VALIDATE CONSTRAINT events_type;

-- The game server's grants (POST /v1/grants) keep their outcome under the
-- same idempotency keys as debits and holds: `granted`, with its entry.
ALTER TABLE wallet.idempotency_keys DROP CONSTRAINT idempotency_keys_outcome_check;
ALTER TABLE wallet.idempotency_keys ADD CONSTRAINT idempotency_keys_outcome_check
    CHECK (outcome IN ('debited', 'insufficient_funds', 'held', 'captured', 'released', 'hold_not_active',
                       'amount_exceeds_hold', 'granted'));
ALTER TABLE wallet.idempotency_keys DROP CONSTRAINT idempotency_keys_entry;
ALTER TABLE wallet.idempotency_keys ADD CONSTRAINT idempotency_keys_entry
    CHECK ((outcome IN ('debited', 'captured', 'granted')) = (entry_id IS NOT NULL));

-- What a refund does when the wallet holds less than it takes back
-- (WALLET_REFUND_DEBT, written by the service at start-up so that the
-- admin scripts refund alike): `allow` takes it all and leaves the wallet
-- in debt; `floor` takes what the wallet holds and records the rest as a
-- shortfall.
ALTER TABLE wallet.lot_settings ADD COLUMN refund_debt TEXT NOT NULL DEFAULT 'allow'
    CHECK (refund_debt IN ('allow', 'floor'));

-- What refunds under `floor` could not take back, one row per refund
-- entry that fell short: the credit refunded `amount` more than its entry
-- took. For reports; a refund reversal gives back what the entry took.
CREATE TABLE wallet.refund_shortfalls (
    entry_id   BIGINT PRIMARY KEY,
    flow_no    TEXT COLLATE "C" NOT NULL,
    user_id    TEXT COLLATE "C" NOT NULL,
    currency   TEXT COLLATE "C" NOT NULL,
    amount     BIGINT NOT NULL CHECK (amount > 0),
    created_at TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX refund_shortfalls_flow_no ON wallet.refund_shortfalls (flow_no);
CREATE TRIGGER refund_shortfalls_append_only BEFORE UPDATE OR DELETE ON wallet.refund_shortfalls
    FOR EACH ROW EXECUTE FUNCTION wallet.refuse_change();
CREATE TRIGGER refund_shortfalls_no_truncate BEFORE TRUNCATE ON wallet.refund_shortfalls
    FOR EACH STATEMENT EXECUTE FUNCTION wallet.refuse_change();

-- Setting a product's bonus is audited with the product
-- (Scripts/admin/product.sql); upsert_product gains the bonus as
-- arguments, so its old form goes (the function file makes the new one).
DROP FUNCTION IF EXISTS wallet.upsert_product(TEXT, BIGINT, TEXT, BOOLEAN, TEXT, TEXT, TEXT);
-- upsert_currency gains `p_paid`.
DROP FUNCTION IF EXISTS wallet.upsert_currency(TEXT, TEXT, TEXT, TEXT);
-- refund_credit answers the shortfall too.
DROP FUNCTION IF EXISTS wallet.refund_credit(TEXT, TEXT, TEXT, BIGINT, TEXT, TEXT);

-- The grant scope: POST /v1/grants, the game server's rewards.
ALTER TABLE wallet.api_keys DROP CONSTRAINT api_keys_scopes_check;
ALTER TABLE wallet.api_keys ADD CONSTRAINT api_keys_scopes_check
    CHECK (cardinality(scopes) > 0
           AND scopes <@ ARRAY['credit', 'debit', 'grant', 'read', 'events', 'console', 'admin']);
