-- Finance report through wallet.report(): per UTC day, per product and
-- currency, the number of credits and coins credited, refunds and coins
-- refunded, debits and coins debited, and the net change in coins (every
-- entry, reversals of Apple refunds included). Grants and revokes appear on
-- lines of their own, as "(grant)" and "(revoke)"; all debits, which belong
-- to no product, as "(debits)". `since` (optional) is a date or timestamp,
-- read as UTC unless it names its zone; without it the report covers all
-- time. It only reads.
--
-- Run:
--   psql -X "$WALLET_DATABASE_URL" -v ON_ERROR_STOP=1 -v since=2026-01-01 -f Scripts/admin/report.sql
-- Add --csv before -f for a spreadsheet.
--
-- Prints a table, one line per day, product and currency, e.g.
--      day     | product_id | currency | credits | credited | refunds | refunded | debits | debited | net
--   2026-12-02 | guodong600 | coin     |       2 |     1200 |       1 |      600 |      0 |       0 | 600

\ir lib/preamble.sql

\if :{?since}
\else
    \set since '-infinity'
\endif

-- Days are UTC days; read `since` in the same zone.
SET TimeZone = 'UTC';

SELECT r.day, r.product_id, r.currency, r.credits, r.credited, r.refunds, r.refunded, r.debits, r.debited, r.net
FROM wallet.report(:'since'::TIMESTAMPTZ) r;
