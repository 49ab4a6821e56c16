-- A purchase the store reports on its own credits its player: an App Store
-- ONE_TIME_CHARGE notification whose appAccountToken names a player
-- (wallet.account_tokens) is credited like the app's own call for it, under
-- the same flowNO, with a source of its own.
ALTER TABLE wallet.credits DROP CONSTRAINT credits_source_check;
ALTER TABLE wallet.credits ADD CONSTRAINT credits_source_check
    CHECK (source IN ('caller', 'appstore-jws', 'appstore-receipt', 'appstore-api', 'googleplay',
                      'appstore-notification'));

-- Verified purchases that name no known player: no account token, or one
-- the wallet has not issued. One leaves when its flowNO is credited, by
-- any path (Migrations/functions/17_account_tokens.sql), and is deleted
-- after WALLET_UNCLAIMED_RETENTION_DAYS.
CREATE TABLE wallet.unclaimed_purchases (
    flow_no       TEXT COLLATE "C" PRIMARY KEY,
    store         TEXT COLLATE "C" NOT NULL CONSTRAINT unclaimed_purchases_store CHECK (store IN ('apple', 'google')),
    product_id    TEXT COLLATE "C" NOT NULL,
    quantity      INTEGER NOT NULL CONSTRAINT unclaimed_purchases_quantity CHECK (quantity BETWEEN 1 AND 10),
    environment   TEXT COLLATE "C" NOT NULL,
    account_token TEXT COLLATE "C",
    received_at   TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX unclaimed_purchases_token ON wallet.unclaimed_purchases (store, account_token)
    WHERE account_token IS NOT NULL;
CREATE INDEX unclaimed_purchases_received ON wallet.unclaimed_purchases (received_at);
