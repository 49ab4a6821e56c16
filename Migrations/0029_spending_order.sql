-- The spending order's one choice: free coins before paid ones (the
-- default) or paid first (WALLET_SPEND_PAID_FIRST), kept in the database
-- so that the admin scripts take from lots as the service does. The
-- service writes its setting at start-up (wallet.set_spending_order).
ALTER TABLE wallet.lot_settings ADD COLUMN spend_paid_first BOOLEAN NOT NULL DEFAULT FALSE;
