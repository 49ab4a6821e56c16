-- Takes coins back from a wallet as a `revoke` ledger entry, through
-- wallet.revoke_coins. It refuses to take the balance below zero unless run
-- with `-v allow_negative=true`; the entry then says so, and the invariant
-- check accepts the negative balance. Like grant.sql, a revoke is identified
-- by its reference (`-v reference=...`, or one derived from the arguments),
-- so the same line run twice applies once and then prints "already applied".
-- The action, operator and reason go to wallet.admin_audit and into the
-- entry's metadata.
--
-- Run:
--   psql -X "$WALLET_DATABASE_URL" -v ON_ERROR_STOP=1 -v user_id=u1 -v amount=100 -v currency=coin -v reason='duplicate grant' -v operator='alice' -f Scripts/admin/revoke.sql
-- and, to let the balance go below zero, add -v allow_negative=true.
--
-- Prints one line, e.g.
--   revoked 100 coin from user u1, balance 600 (entry 44, reference revoke:c5ba…)
--   already applied: revoke revoke:c5ba… from user u1 is entry 44; nothing changed, balance 600 coin

\ir lib/one_line.sql

\if :{?user_id}
\else
    SELECT wallet.require_text('-v user_id', NULL);
\endif
\if :{?amount}
\else
    SELECT wallet.require_text('-v amount', NULL);
\endif
\if :{?currency}
\else
    SELECT wallet.require_text('-v currency', NULL);
\endif
\if :{?reason}
\else
    SELECT wallet.require_text('-v reason', NULL);
\endif
\if :{?operator}
\else
    SELECT wallet.require_text('-v operator', NULL);
\endif
\if :{?allow_negative}
\else
    \set allow_negative false
\endif
\if :{?reference}
\else
    \set reference ''
\endif

SELECT CASE r.outcome
           WHEN 'revoked' THEN format('revoked %s %s from user %s, balance %s (entry %s, reference %s)',
                                      :'amount'::BIGINT, :'currency', :'user_id', r.balance, r.entry_id, r.reference)
           ELSE format('already applied: revoke %s from user %s is entry %s; nothing changed, balance %s %s',
                       r.reference, :'user_id', r.entry_id, r.balance, :'currency')
       END
FROM wallet.revoke_coins(:'user_id', :'amount'::BIGINT, :'currency', :'reason', :'operator',
                         :'allow_negative'::BOOLEAN, NULLIF(:'reference', '')) r;
