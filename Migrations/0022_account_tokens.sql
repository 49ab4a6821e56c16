-- Which player an account token names. The wallet issues each player's
-- tokens (GET /v1/wallets/{user_id}/account-tokens): the App Store's
-- appAccountToken, UUIDv5 of the user id under
-- WALLET_APPLE_ACCOUNT_TOKEN_NAMESPACE, and Google Play's
-- obfuscatedExternalAccountId, the hex SHA-256 of the user id. Both are
-- one-way, so a purchase the store reports itself, carrying a token and no
-- player, is matched here. A token is recorded when the wallet issues it
-- and when a player's wallet is made (Migrations/functions/17_account_tokens.sql).
CREATE TABLE wallet.account_tokens (
    store      TEXT COLLATE "C" NOT NULL CONSTRAINT account_tokens_store CHECK (store IN ('apple', 'google')),
    token      TEXT COLLATE "C" NOT NULL CONSTRAINT account_tokens_token CHECK (
        (store = 'apple' AND token ~ '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$')
        OR (store = 'google' AND token ~ '^[0-9a-f]{64}$')),
    user_id    TEXT COLLATE "C" NOT NULL,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (store, token)
);
CREATE INDEX account_tokens_user ON wallet.account_tokens (user_id);

-- The App Store namespace the service runs with, written by the service at
-- start-up, so that a wallet an admin script makes records its token too.
CREATE TABLE wallet.account_token_settings (
    only_row        BOOLEAN PRIMARY KEY DEFAULT TRUE CHECK (only_row),
    apple_namespace UUID
);
INSERT INTO wallet.account_token_settings DEFAULT VALUES;

-- UUIDv5 in SQL is uuid-ossp's, PostgreSQL's own extension (trusted: the
-- database's owner may create it). Without it, a wallet made in SQL records
-- only its Google token; the service still records both when it issues them.
DO $$
BEGIN
    CREATE EXTENSION IF NOT EXISTS "uuid-ossp";
EXCEPTION WHEN insufficient_privilege THEN
    RAISE NOTICE 'uuid-ossp is not installed (%): App Store tokens are recorded only when the service issues them',
        SQLERRM;
END;
$$;
