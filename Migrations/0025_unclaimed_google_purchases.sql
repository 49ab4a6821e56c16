-- A Google Play purchase reported by its own notification and naming no
-- known player is kept with its purchase token: its credit is the token's
-- (credited once per token, and consumed). The function that keeps one
-- takes the token, so the old one goes (Migrations/functions/17_account_tokens.sql).
ALTER TABLE wallet.unclaimed_purchases ADD COLUMN purchase_token TEXT COLLATE "C";
ALTER TABLE wallet.unclaimed_purchases ADD CONSTRAINT unclaimed_purchases_token_store
    CHECK ((store = 'google') = (purchase_token IS NOT NULL));
DROP FUNCTION IF EXISTS wallet.keep_unclaimed_purchase(TEXT, TEXT, TEXT, INTEGER, TEXT, TEXT);
