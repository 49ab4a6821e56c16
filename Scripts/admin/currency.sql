-- Adds a currency to the catalog, or renames one, through
-- wallet.upsert_currency. A currency's `code` ([a-z][a-z0-9_]{0,31}) is
-- what requests, wallets, products and the ledger name; it never changes
-- and a currency is never removed. Its `name` (1-64 characters) is what
-- people read. A product can sell a currency, and debits, holds, grants and
-- reads can name it, only once it exists here (`unknown_currency`
-- otherwise). A paid currency (-v paid=true) is one only purchases make:
-- the game server's grants (POST /v1/grants) of it are refused with
-- paid_currency_not_grantable; left out, `paid` keeps the flag (a new
-- currency is not paid). The change goes to wallet.admin_audit under the
-- given operator, or under the database session_user when none is given.
--
-- Run:
--   psql -X "$WALLET_DATABASE_URL" -v ON_ERROR_STOP=1 -v code=gem -v name='Gems' -v operator='alice' -v reason='gem shop' -f Scripts/admin/currency.sql
-- `operator`, `reason` and `paid` are optional: add -v paid=true for a
-- currency only purchases make.
--
-- Prints one line, e.g.
--   created currency gem: Gems, paid
--   unchanged currency coin: Coin, grantable

\ir lib/one_line.sql

\if :{?code}
\else
    SELECT wallet.require_text('-v code', NULL);
\endif
\if :{?name}
\else
    SELECT wallet.require_text('-v name', NULL);
\endif
\if :{?paid}
\else
    \set paid ''
\endif
\if :{?operator}
\else
    \set operator ''
\endif
\if :{?reason}
\else
    \set reason ''
\endif

SELECT format('%s currency %s: %s, %s', c.outcome, c.code, c.name, CASE WHEN c.paid THEN 'paid' ELSE 'grantable' END)
FROM wallet.upsert_currency(:'code', :'name', NULLIF(:'operator', ''), NULLIF(:'reason', ''),
                            NULLIF(:'paid', '')::BOOLEAN) c;
