-- Unused paid currency as of an instant, per currency, through
-- wallet.paid_balance(): the coins players bought from the stores and have
-- not yet spent (nor had refunded) at `as_of`, replayed from the ledger,
-- with how many wallets held some. Held coins count as unused. This is
-- the figure Japan's Payment Services Act asks for on its base dates
-- (31 March and 30 September). Free coins (bonuses, grants, rewards) are
-- not in it.
--
-- `as_of` is a date, meaning the end of that day, or a timestamp; both
-- are read in `tz` (UTC when left out; -v tz=Asia/Tokyo for Japan's base
-- dates). Figures are exact from the upgrade that made lots on; an
-- earlier instant is an error that says from when. It only reads.
--
-- Run:
--   psql -X "$WALLET_DATABASE_URL" -v ON_ERROR_STOP=1 -v as_of=2027-03-31 -v tz=Asia/Tokyo -f Scripts/admin/paid-balance.sql
-- Add --csv before -f for a spreadsheet.
--
-- Prints a table, one line per currency of the catalog, e.g.
--   currency |  paid  | wallets
--   coin     | 184200 |      97

\ir lib/preamble.sql

\if :{?as_of}
\else
    SELECT wallet.require_text('-v as_of', NULL);
\endif
\if :{?tz}
\else
    \set tz UTC
\endif

SET TimeZone = :'tz';
-- A bare date is the end of that day: the instant the next one starts.
SELECT CASE WHEN :'as_of' ~ '^\d{4}-\d{2}-\d{2}$' THEN (:'as_of'::DATE + 1)::TIMESTAMPTZ
            ELSE :'as_of'::TIMESTAMPTZ END AS as_of_instant \gset

SELECT b.currency, b.paid, b.wallets
FROM wallet.paid_balance(:'as_of_instant'::TIMESTAMPTZ) b;
