-- A product may sell more than one currency: a bundle of 1,000 coins and 50
-- gems. The product's own (currency, amount) stays its first line: what
-- the credit row records, what a caller's `amount` is checked against, and
-- what the credit's answer shows. These are its other lines, one per
-- currency, each bought with the same money: paid coins in a lot of their
-- own, taken back by the purchase's refund.
CREATE TABLE wallet.product_lines (
    product_id TEXT COLLATE "C" NOT NULL REFERENCES wallet.products (product_id),
    currency   TEXT COLLATE "C" NOT NULL REFERENCES wallet.currencies (code),
    amount     BIGINT NOT NULL CHECK (amount BETWEEN 1 AND 1000000000000),
    updated_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (product_id, currency)
);

-- What a credit got from its product's other lines (amount × quantity,
-- fixed when credited, as the credit's own amount is), the entry that
-- credited each, and how much of each its refunds have taken back (the
-- same share of the line as the credit's refunded_amount is of the
-- credit).
CREATE TABLE wallet.credit_lines (
    flow_no         TEXT COLLATE "C" NOT NULL REFERENCES wallet.credits (flow_no),
    currency        TEXT COLLATE "C" NOT NULL,
    amount          BIGINT NOT NULL CHECK (amount > 0),
    entry_id        BIGINT NOT NULL UNIQUE,
    refunded_amount BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (flow_no, currency),
    CONSTRAINT credit_lines_refunded CHECK (refunded_amount BETWEEN 0 AND amount)
);
-- Kept for good, as the credits they belong to are.
CREATE TRIGGER credit_lines_kept BEFORE DELETE ON wallet.credit_lines
    FOR EACH ROW EXECUTE FUNCTION wallet.refuse_change();
CREATE TRIGGER credit_lines_no_truncate BEFORE TRUNCATE ON wallet.credit_lines
    FOR EACH STATEMENT EXECUTE FUNCTION wallet.refuse_change();

-- A credit's other lines are `credit` entries under its flowNO too, one per
-- currency: the ledger's own guard against crediting a flowNO twice
-- becomes one credit entry per flowNO and currency. (The credit row, one
-- per flowNO, still allows one purchase; its lines are each a currency the
-- product's own is not.)
CREATE UNIQUE INDEX entries_credit_reference_currency ON wallet.entries (reference, currency) WHERE kind = 'credit';
DROP INDEX wallet.entries_credit_reference;

-- What wallet.credit_many reads about an operation gains its product's
-- other lines.
ALTER TYPE wallet.credit_state ADD ATTRIBUTE lines wallet.product_lines[];

-- Functions whose arguments or results change (their new forms are in the
-- function files; a new database never had them).
DROP FUNCTION IF EXISTS wallet.credit_state_of(wallet.credits, wallet.products, TEXT, wallet.wallet_key, INTEGER,
                                     wallet.product_bonuses);
DROP FUNCTION IF EXISTS wallet.credit_wallet_keys(wallet.credit_state[]);
DROP FUNCTION IF EXISTS wallet.batch_wallets_plus(wallet.batch_wallet[], INTEGER, BIGINT);
DROP FUNCTION IF EXISTS wallet.upsert_product(TEXT, BIGINT, TEXT, BOOLEAN, TEXT, TEXT, TEXT, BIGINT, TEXT, INTEGER);
