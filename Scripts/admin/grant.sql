-- Adds coins to a wallet as a `grant` ledger entry, through
-- wallet.grant_coins. `amount` must be above zero and `currency` one the
-- catalog sells. The grant is identified by its reference: without
-- `-v reference=...` one is derived from the other arguments, so the same
-- line run twice applies once and then prints "already applied". Give a
-- reference (a ticket number, say) to make two equal grants on purpose.
-- The action, operator and reason go to wallet.admin_audit and into the
-- entry's metadata. With `-v expires_in_days=N` (1-3650) the coins are
-- free coins that expire N days from now; without it they never expire.
-- Either way they are free coins: only purchases make paid ones.
--
-- Run:
--   psql -X "$WALLET_DATABASE_URL" -v ON_ERROR_STOP=1 -v user_id=u1 -v amount=100 -v currency=coin -v reason='outage compensation' -v operator='alice' -f Scripts/admin/grant.sql
--
-- Prints one line, e.g.
--   granted 100 coin to user u1, balance 700 (entry 43, reference grant:e703…)
--   already applied: grant grant:e703… to user u1 is entry 43; nothing changed, balance 700 coin

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
\if :{?reference}
\else
    \set reference ''
\endif
\if :{?expires_in_days}
\else
    \set expires_in_days ''
\endif

SELECT CASE g.outcome
           WHEN 'granted' THEN format('granted %s %s to user %s%s, balance %s (entry %s, reference %s)',
                                      :'amount'::BIGINT, :'currency', :'user_id',
                                      CASE WHEN :'expires_in_days' <> ''
                                           THEN format(', expiring in %s days', :'expires_in_days') ELSE '' END,
                                      g.balance, g.entry_id, g.reference)
           ELSE format('already applied: grant %s to user %s is entry %s; nothing changed, balance %s %s',
                       g.reference, :'user_id', g.entry_id, g.balance, :'currency')
       END
FROM wallet.grant_coins(:'user_id', :'amount'::BIGINT, :'currency', :'reason', :'operator',
                        NULLIF(:'reference', ''), NULLIF(:'expires_in_days', '')::INTEGER) g;
