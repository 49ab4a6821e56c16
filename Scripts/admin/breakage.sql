-- Breakage through wallet.breakage(): the coins that expired unspent, per
-- UTC month and currency, from the ledger's `expire` entries, with how
-- many entries and players. Paid coins never expire, so every coin here
-- was free (a grant's). `since` (optional) is a date or timestamp, read as
-- UTC unless it names its zone; without it the report covers all time. It
-- only reads.
--
-- Run:
--   psql -X "$WALLET_DATABASE_URL" -v ON_ERROR_STOP=1 -v since=2026-01-01 -f Scripts/admin/breakage.sql
-- Add --csv before -f for a spreadsheet.
--
-- Prints a table, one line per month and currency, e.g.
--    month  | currency | expired | entries | players
--   2026-12 | coin     |    1500 |       3 |       2

\ir lib/preamble.sql

\if :{?since}
\else
    \set since '-infinity'
\endif

-- Months are UTC months; read `since` in the same zone.
SET TimeZone = 'UTC';

SELECT b.month, b.currency, b.expired, b.entries, b.players
FROM wallet.breakage(:'since'::TIMESTAMPTZ) b;
