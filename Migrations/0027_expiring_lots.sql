-- Lots that expire: free coins may carry an expiry (paid coins never do:
-- lots_paid_never_expire). Past
-- it, their coins stop counting as available at once, and an `expire`
-- entry takes them out of the balance: written before anything decides on
-- a wallet's coins under its lock, or by the sweeper.

-- The soonest expiry among a wallet's open lots, kept by wallet.move_lots;
-- NULL when none of them expires. Writes test it before reading any lot.
ALTER TABLE wallet.wallets ADD COLUMN next_expiry TIMESTAMPTZ;
-- The sweeper's next wallets.
CREATE INDEX wallets_next_expiry ON wallet.wallets (next_expiry) WHERE next_expiry IS NOT NULL;

-- A new kind of entry, `expire`: coins past their lot's expiry taken out
-- of the balance (event `coins.expired`).
ALTER TABLE wallet.entries DROP CONSTRAINT entries_kind, DROP CONSTRAINT entries_sign;
ALTER TABLE wallet.entries
    ADD CONSTRAINT entries_kind CHECK (
        kind IN ('credit', 'debit', 'refund', 'refund_reversal', 'grant', 'revoke', 'expire')) NOT VALID,
    ADD CONSTRAINT entries_sign CHECK (
        CASE WHEN kind IN ('credit', 'refund_reversal', 'grant') THEN amount > 0 ELSE amount < 0 END) NOT VALID;
ALTER TABLE wallet.entries VALIDATE CONSTRAINT entries_kind;
ALTER TABLE wallet.entries VALIDATE CONSTRAINT entries_sign;

ALTER TABLE wallet.events DROP CONSTRAINT events_type;
ALTER TABLE wallet.events ADD CONSTRAINT events_type CHECK (type IN (
    'credit.created', 'credit.refunded', 'credit.refund_reversed', 'debit.created',
    'hold.placed', 'hold.captured', 'hold.released', 'hold.expired',
    'grant.created', 'revoke.created', 'balance.negative', 'coins.expired')) NOT VALID;
ALTER TABLE wallet.events VALIDATE CONSTRAINT events_type;

-- A posting that makes a lot may say which (`lot_source`) and when it
-- expires. wallet.new_posting gains both as arguments, so its
-- old form goes; the function file makes the new one.
ALTER TYPE wallet.posting
    ADD ATTRIBUTE lot_source TEXT,
    ADD ATTRIBUTE lot_expires_at TIMESTAMPTZ;
DROP FUNCTION IF EXISTS wallet.new_posting(TEXT, TEXT, TEXT, BIGINT, TEXT, TEXT, JSONB, BIGINT, TEXT, BIGINT, TEXT, JSONB);

-- A grant may expire: grant_coins, adjust_balance and adjustment_reference
-- take `p_expires_in_days`, so their old forms go (the function file makes
-- the new ones; references derived before stay the same).
DROP FUNCTION IF EXISTS wallet.grant_coins(TEXT, BIGINT, TEXT, TEXT, TEXT, TEXT);
DROP FUNCTION IF EXISTS wallet.adjust_balance(TEXT, TEXT, BIGINT, TEXT, TEXT, TEXT, TEXT, BOOLEAN);
DROP FUNCTION IF EXISTS wallet.adjustment_reference(TEXT, TEXT, BIGINT, TEXT, TEXT, TEXT, TEXT);
