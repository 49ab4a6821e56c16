-- Refunds a credit in full: writes a `refund` ledger entry for the amount
-- the flowNO was credited with and marks the credit `refunded`, through
-- wallet.refund_credit, the function the service uses for Apple's refunds.
-- The coins come back from the purchase's own lot first, then from the
-- wallet's other lots in spending order. Past the wallet's coins, the
-- database's WALLET_REFUND_DEBT setting (written by the service at
-- start-up) decides: under `allow` the balance goes below zero, a debt
-- the next increases repay, and debits are refused with
-- insufficient_funds until then; under `floor` the balance stops at zero
-- and the rest is recorded in wallet.refund_shortfalls. Running it again changes
-- nothing and prints "already refunded". An unknown flowNO is an error that
-- names it. The action, operator and reason go to wallet.admin_audit.
--
-- Run:
--   psql -X "$WALLET_DATABASE_URL" -v ON_ERROR_STOP=1 -v flow_no=2000000123 -v reason='chargeback' -v operator='alice' -f Scripts/admin/refund.sql
--
-- Prints one line, e.g.
--   refunded flowNO 2000000123: 600 coin from user u1, balance -400 (entry 42)
--   refunded flowNO 2000000124: 600 coin from user u2, balance 0 (entry 43), shortfall 400
--   already refunded flowNO 2000000123: nothing changed, balance -400 coin for user u1

\ir lib/one_line.sql

\if :{?flow_no}
\else
    SELECT wallet.require_text('-v flow_no', NULL);
\endif
\if :{?reason}
\else
    SELECT wallet.require_text('-v reason', NULL);
\endif
\if :{?operator}
\else
    SELECT wallet.require_text('-v operator', NULL);
\endif

SELECT CASE r.outcome
           WHEN 'refunded' THEN format('refunded flowNO %s: %s %s from user %s, balance %s (entry %s)',
                                       :'flow_no', r.amount, r.currency, r.user_id, r.balance, r.entry_id)
                                || CASE WHEN r.shortfall > 0 THEN format(', shortfall %s', r.shortfall) ELSE '' END
           ELSE format('already refunded flowNO %s: nothing changed, balance %s %s for user %s',
                       :'flow_no', r.balance, r.currency, r.user_id)
       END
FROM wallet.refund_credit(:'flow_no', :'reason', :'operator') r;
