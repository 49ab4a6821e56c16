-- Currencies are the catalog's own list now, rather than whatever its
-- products happen to use: a currency exists before any product sells it,
-- and debits, holds, grants and reads name one of these
-- (Scripts/admin/currency.sql manages them).
CREATE TABLE wallet.currencies (
    code       TEXT COLLATE "C" PRIMARY KEY
               CHECK (length(code) BETWEEN 1 AND 32 AND code ~ '^[a-z]' AND code !~ '[^a-z0-9_]'),
    name       TEXT NOT NULL CHECK (length(btrim(name)) BETWEEN 1 AND 64),
    created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at TIMESTAMPTZ NOT NULL DEFAULT now()
);

-- Every currency the catalog sold and every wallet holds is one.
INSERT INTO wallet.currencies (code, name)
SELECT c.currency, initcap(replace(c.currency, '_', ' '))
FROM (SELECT p.currency FROM wallet.products p UNION SELECT w.currency FROM wallet.wallets w) c
ORDER BY 1
ON CONFLICT DO NOTHING;
INSERT INTO wallet.currencies (code, name) VALUES ('coin', 'Coin') ON CONFLICT DO NOTHING;

ALTER TABLE wallet.products
    ADD CONSTRAINT products_currency_known FOREIGN KEY (currency) REFERENCES wallet.currencies (code);

-- A currency, once named, stays: products, wallets and the ledger name it.
CREATE TRIGGER currencies_kept BEFORE DELETE ON wallet.currencies
    FOR EACH ROW EXECUTE FUNCTION wallet.refuse_change();
CREATE TRIGGER currencies_no_truncate BEFORE TRUNCATE ON wallet.currencies
    FOR EACH STATEMENT EXECUTE FUNCTION wallet.refuse_change();

ALTER TABLE wallet.wallets
    ADD CONSTRAINT wallets_currency_known FOREIGN KEY (currency) REFERENCES wallet.currencies (code);

-- Adding or renaming a currency is audited (Scripts/admin/currency.sql).
ALTER TABLE wallet.admin_audit DROP CONSTRAINT admin_audit_action_check;
ALTER TABLE wallet.admin_audit ADD CONSTRAINT admin_audit_action_check
    CHECK (action IN ('refund', 'grant', 'revoke', 'product', 'release_hold', 'revoke_key',
                      'webhook_add', 'webhook_disable', 'webhook_enable', 'claim', 'currency'));
