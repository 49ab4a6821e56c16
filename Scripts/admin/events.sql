-- Events: lists a player's events, newest first: every change to their
-- wallets as the feed (GET /v1/events) and webhooks tell it, with the
-- balance, held and available coins after each.
--
-- Run:
--   psql -X "$WALLET_DATABASE_URL" -v ON_ERROR_STOP=1 -v user_id=u1 -f Scripts/admin/events.sql
-- and add -v limit=500 for more than the newest 100, -v type=credit.refunded
-- for one type.
--
-- Prints a table, e.g.
--    id | type             | currency | amount | balance_after | held | available | entry_id | hold_id | flow_no | created_at
--    57 | credit.refunded  | coin     |   -600 |          -100 |    0 |      -100 |       31 |         | 2000001 | 2026-12-07T05:00:00.000000Z
--    58 | balance.negative | coin     |      0 |          -100 |    0 |      -100 |       31 |         | 2000001 | 2026-12-07T05:00:00.000000Z
-- Events older than WALLET_EVENTS_RETENTION_DAYS are gone; the ledger
-- (wallet.entries) keeps every entry for good.

\ir lib/preamble.sql

\if :{?user_id}
\else
    SELECT wallet.require_text('-v user_id', NULL);
\endif
\if :{?limit}
\else
    \set limit 100
\endif
\if :{?type}
\else
    \set type ''
\endif
SELECT * FROM wallet.player_events(:'user_id', NULLIF(:'type', ''), :'limit'::INTEGER);
