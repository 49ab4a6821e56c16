-- Refund-risk report through wallet.refund_risk(): the users who had
-- refunds in the last `days` days, one line per user and currency, with the
-- number of refunds and the coins they took back, the purchases (credits)
-- in the same window, the balance now, and how many App Store consumption
-- requests about the user's purchases were answered (sent to Apple) in the
-- window. A refund is in the window when its ledger entry was written at or
-- after now() - days × 24 hours; a purchase likewise by its credit entry,
-- and a consumption answer by the time it was sent. A refund later reversed
-- still counts. Users left with a negative balance come first, then by
-- coins refunded, then by number of refunds (both descending), then by
-- user. `days` (optional, default 30) must be a positive integer. It only
-- reads.
--
-- Run:
--   psql -X "$WALLET_DATABASE_URL" -v ON_ERROR_STOP=1 -v days=30 -f Scripts/admin/refunds.sql
-- Add --csv before -f for a spreadsheet.
--
-- Prints a table, one line per user and currency, e.g.
--    user_id | currency | refunds | refunded | purchases | balance | consumption_answered
--    u1      | coin     |       1 |      600 |         2 |    -400 |                    1
--    u2      | coin     |       2 |     6200 |         2 |       0 |                    0

\ir lib/preamble.sql

\if :{?days}
\else
    \set days 30
\endif

SELECT r.user_id, r.currency, r.refunds, r.refunded, r.purchases, r.balance, r.consumption_answered
FROM wallet.refund_risk(:'days'::INTEGER) r;
