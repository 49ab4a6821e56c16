-- Adds a product to the catalog or changes one, through
-- wallet.upsert_product: how many coins (`amount`, above zero) of which
-- `currency` one unit of the App Store product buys, and whether it is on
-- sale (`active`). An inactive product is refused for new credits. Left
-- out, `active` is true for a new product and unchanged for an existing
-- one, so a price change never puts a product back on sale by accident.
-- Past credits keep the amount stored with them; a change applies only to
-- later credits. The change goes to wallet.admin_audit under the given
-- operator, or under the database session_user when none is given.
--
-- Run:
--   psql -X "$WALLET_DATABASE_URL" -v ON_ERROR_STOP=1 -v product_id=guodong600 -v amount=700 -v currency=coin -v operator='alice' -v reason='summer promotion' -f Scripts/admin/product.sql
-- `active`, `operator` and `reason` are optional: add -v active=false to take
-- a product off sale, -v active=true to put it back.
--
-- Prints one line, e.g.
--   updated product guodong600: 700 coin, active
--   created product guodong9000: 9000 coin, inactive

\set ON_ERROR_STOP on
\set QUIET on
\pset tuples_only on
\pset format unaligned

\if :{?product_id}
\else
    SELECT wallet.require_text('-v product_id', NULL);
\endif
\if :{?amount}
\else
    SELECT wallet.require_text('-v amount', NULL);
\endif
\if :{?currency}
\else
    SELECT wallet.require_text('-v currency', NULL);
\endif
-- Unset, `active` keeps the product's flag as it is (a new product is on sale).
\if :{?active}
\else
    \set active ''
\endif
\if :{?operator}
\else
    \set operator ''
\endif
\if :{?reason}
\else
    \set reason ''
\endif

SELECT format('%s product %s: %s %s, %s', p.outcome, p.product_id, p.amount, p.currency,
              CASE WHEN p.active THEN 'active' ELSE 'inactive' END)
FROM wallet.upsert_product(:'product_id', :'amount'::BIGINT, :'currency', NULLIF(:'active', '')::BOOLEAN,
                           NULLIF(:'operator', ''), NULLIF(:'reason', '')) p;
