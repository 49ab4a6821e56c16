-- Credits an unclaimed purchase (a store's charge that named no known
-- player: wallet.unclaimed_purchases) to a player after a support check,
-- through wallet.claim_purchase, which credits it like every credit and
-- audits the claim. A purchase whose account token is another player's is
-- refused (WL010); one the credit refuses, revoked since for one, is
-- refused too (WL011); nothing is written then. Running it again prints
-- "already credited".
--
-- Run:
--   psql -X "$WALLET_DATABASE_URL" -v ON_ERROR_STOP=1 -v flow_no=2000000123 -v user_id=u1 -v reason='ticket 4411: receipt checked' -v operator='alice' -f Scripts/admin/claim.sql
--
-- Prints one line, e.g.
--   credited flowNO 2000000123 to user u1: 600 coin, balance 600 (entry 42)
--   already credited flowNO 2000000123 to user u1: 600 coin (entry 42); nothing changed, balance 600

\ir lib/one_line.sql

\if :{?flow_no}
\else
    SELECT wallet.require_text('-v flow_no', NULL);
\endif
\if :{?user_id}
\else
    SELECT wallet.require_text('-v user_id', NULL);
\endif
\if :{?reason}
\else
    SELECT wallet.require_text('-v reason', NULL);
\endif
\if :{?operator}
\else
    SELECT wallet.require_text('-v operator', NULL);
\endif

SELECT CASE c.outcome
           WHEN 'credited' THEN format('credited flowNO %s to user %s: %s %s, balance %s (entry %s)',
                                       :'flow_no', c.user_id, c.amount, c.currency, c.balance, c.entry_id)
           ELSE format('already credited flowNO %s to user %s: %s %s (entry %s); nothing changed, balance %s',
                       :'flow_no', c.user_id, c.amount, c.currency, c.entry_id, c.balance)
       END
FROM wallet.claim_purchase(:'flow_no', :'user_id', :'reason', :'operator') c;
