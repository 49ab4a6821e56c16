-- Holds: lists the active ones (held and not past their time), oldest
-- first, or releases one. A release gives the held coins back to the
-- available balance with no ledger entry, through wallet.admin_release_hold,
-- which takes the wallet's row lock as the service does and writes the
-- action, operator and reason to wallet.admin_audit.
--
-- Run:
--   psql -X "$WALLET_DATABASE_URL" -v ON_ERROR_STOP=1 -f Scripts/admin/holds.sql
-- to list them (add -v user_id=u1 for one user's), and
--   psql -X "$WALLET_DATABASE_URL" -v ON_ERROR_STOP=1 -v hold_id=42 -v reason='match cancelled' -v operator='alice' -f Scripts/admin/holds.sql
-- to release one.
--
-- Prints a table when listing, e.g.
--    hold_id | client      | user_id | currency | amount | reason      | created_at           | expires_at
--         42 | game-server | u1      | coin     |    100 | match entry | 2026-12-03T05:00:00Z | 2026-12-03T05:05:00Z
-- and one line when releasing:
--   released hold 42: 100 coin of user u1 are available again
--   hold 42 was already captured: nothing changed

\ir lib/preamble.sql

\if :{?hold_id}
    \if :{?reason}
    \else
        SELECT wallet.require_text('-v reason', NULL);
    \endif
    \if :{?operator}
    \else
        SELECT wallet.require_text('-v operator', NULL);
    \endif
    \pset tuples_only on
    \pset format unaligned
    SELECT CASE r.outcome
               WHEN 'released' THEN format('released hold %s: %s %s of user %s are available again',
                                           :'hold_id'::BIGINT, r.amount, r.currency, r.user_id)
               ELSE format('hold %s was already %s: nothing changed', :'hold_id'::BIGINT, r.status)
           END
    FROM wallet.admin_release_hold(:'hold_id'::BIGINT, :'reason', :'operator') r;
\else
    \if :{?user_id}
    \else
        \set user_id ''
    \endif
    SELECT * FROM wallet.active_holds(NULLIF(:'user_id', ''));
\endif
