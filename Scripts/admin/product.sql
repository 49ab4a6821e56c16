-- Adds a product to the catalog or changes one, through
-- wallet.upsert_product: how many coins (`amount`, above zero) of which
-- `currency` one unit of the App Store product buys, and whether it is on
-- sale (`active`). An inactive product is refused for new credits. Left
-- out, `active` is true for a new product and unchanged for an existing
-- one, so a price change never puts a product back on sale by accident.
-- `google_product_id` names the product in Google Play when its id there
-- differs from ours (lowercase letters, digits, `.` and `_`); left out, it
-- stays as it is, and an empty one sets it back to the product's own id.
-- A Google Play id buys one product: a change that would leave the product
-- on sale under a Google Play id (its own id, when it names none) another
-- active product has fails with WL009, naming that product, and changes
-- nothing; take the other off sale first.
-- A bonus adds free coins to every unit bought: `bonus_amount` of
-- `bonus_currency` (the product's own currency when left out), expiring
-- `bonus_expires_in_days` (1-3650) after the credit, or never when left
-- out. The bonus is its own `bonus` entry under the credit's flowNO, a
-- free lot: spent before paid coins, and not what a refund takes back
-- first. Left out, `bonus_amount` keeps the product's bonus as it is;
-- -v bonus_amount=0 removes it.
-- A product may sell more currencies with each unit: `lines`, a JSON object
-- of currency to amount (-v lines='{"gem": 50}'), other than the product's
-- own currency, which `amount` gives. Each line is a `credit` entry of its
-- own under the credit's flowNO and a paid lot; a refund takes back the same
-- share of each line as of the credit. Left out, `lines` keeps the
-- product's lines as they are; -v lines='{}' removes them.
-- Past credits keep the amount (and bonus) stored with them; a change
-- applies only to later credits. The change goes to wallet.admin_audit under the given
-- operator, or under the database session_user when none is given.
--
-- Run:
--   psql -X "$WALLET_DATABASE_URL" -v ON_ERROR_STOP=1 -v product_id=guodong600 -v amount=700 -v currency=coin -v operator='alice' -v reason='summer promotion' -f Scripts/admin/product.sql
-- `active`, `operator`, `reason` and `google_product_id` are optional: add
-- -v active=false to take a product off sale, -v active=true to put it back,
-- -v google_product_id=coins_600 to name its Google Play product,
-- -v bonus_amount=500 -v bonus_expires_in_days=30 to add a bonus,
-- -v lines='{"gem": 50}' to sell 50 gems with each unit too.
--
-- Prints one line, e.g.
--   updated product guodong600: 700 coin, active, Google Play guodong600
--   created product guodong9000: 9000 coin, inactive, Google Play coins_9000
--   updated product guodong5000: 5000 coin, active, Google Play guodong5000, bonus 500 coin for 30 days
--   created product starter: 1000 coin, active, Google Play starter, and 50 gem

\ir lib/one_line.sql

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
-- Unset, `google_product_id` keeps the product's Google Play id as it is.
\if :{?google_product_id}
    \set google_product_set true
\else
    \set google_product_set false
    \set google_product_id ''
\endif
\if :{?bonus_amount}
\else
    \set bonus_amount ''
\endif
\if :{?bonus_currency}
\else
    \set bonus_currency ''
\endif
\if :{?bonus_expires_in_days}
\else
    \set bonus_expires_in_days ''
\endif
\if :{?lines}
\else
    \set lines ''
\endif
\if :{?operator}
\else
    \set operator ''
\endif
\if :{?reason}
\else
    \set reason ''
\endif

SELECT format('%s product %s: %s %s, %s, Google Play %s', p.outcome, p.product_id, p.amount, p.currency,
              CASE WHEN p.active THEN 'active' ELSE 'inactive' END, p.google_product_id)
       || CASE WHEN p.bonus_amount IS NULL THEN ''
               ELSE format(', bonus %s %s %s', p.bonus_amount, p.bonus_currency,
                           coalesce('for ' || p.bonus_expires_in_days || ' days', 'never expiring')) END
       || coalesce((SELECT ', and ' || string_agg(l.value || ' ' || l.key, ', ' ORDER BY l.key)
                    FROM jsonb_each_text(p.lines) l), '')
FROM wallet.upsert_product(:'product_id', :'amount'::BIGINT, :'currency', NULLIF(:'active', '')::BOOLEAN,
                           NULLIF(:'operator', ''), NULLIF(:'reason', ''),
                           CASE WHEN :'google_product_set'::BOOLEAN THEN :'google_product_id' END,
                           NULLIF(:'bonus_amount', '')::BIGINT, NULLIF(:'bonus_currency', ''),
                           NULLIF(:'bonus_expires_in_days', '')::INTEGER, NULLIF(:'lines', '')::JSONB) p;
