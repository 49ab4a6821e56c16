-- Seeds a wallet database with a realistic volume for the support console's
-- browser tests: 10,000 players (seed-user-00001 .. seed-user-10000) and
-- exactly 200,000 ledger entries spread over the last 90 UTC days (today
-- included), with their credits, admin audit rows and App Store refund
-- notifications. Everything it writes keeps wallet.check_invariants() (and so
-- `wallet check`) clean:
--
--   * every credit entry has its one credits row (same flowNO, user, amount);
--   * balance_after chains along id order within each wallet, and each
--     wallet's balance is its last balance_after (= the sum of its entries);
--   * entry signs follow entries_sign (credit/grant > 0, debit/refund < 0);
--   * a debit never takes a balance below zero: a player's debit is at most
--     (coins received so far) / (number of the player's debits), so all of
--     them together never exceed what came in before them;
--   * a refund is a player's last entry (it may leave the balance negative,
--     which only a refund may do), its credit is marked refunded by the same
--     source for the same amount, and nothing follows it;
--   * every entry is told by its event, and each wallet's last event shows
--     it as it is;
--   * each balance above zero is held by lots, as an upgraded database's is.
--
-- Entry ids are drawn from wallet.entries_id_seq, as the service draws them,
-- and given out in created_at order, so ids and times grow together (the
-- BRIN indexes on created_at expect that). Deterministic (setseed) apart from
-- the dates, which are relative to now(). One transaction; refuses to run
-- twice on the same database.
--
--   psql -X "$CONNINFO" -v ON_ERROR_STOP=1 -f Tests/Browser/seed.sql

\set ON_ERROR_STOP on
\set QUIET on

BEGIN;

DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM wallet.wallets WHERE user_id = 'seed-user-00001') THEN
        RAISE EXCEPTION 'this database is already seeded (seed-user-00001 exists)';
    END IF;
END;
$$;

DO $$ BEGIN PERFORM setseed(0.20261203); END; $$;

-- Players, and how many entries each gets: 20 on average, 6 to 34, in pairs
-- that add up to 40, so the total is exactly 200,000.
CREATE TEMP TABLE seed_users ON COMMIT DROP AS
SELECT u,
       'seed-user-' || lpad(u::TEXT, 5, '0') AS user_id,
       20 + CASE WHEN u % 2 = 1 THEN (u / 2) % 15 ELSE -(((u - 1) / 2) % 15) END AS n,
       -- One player in 25 ends with a refund (half of those from Apple).
       u % 25 = 0 AS refunds,
       u % 50 = 0 AS refund_by_apple,
       -- A refunding player's history ends somewhere in the window (its
       -- refund is its last entry), so refunds fall on every week.
       CASE WHEN u % 25 = 0 THEN 0.1 + 0.9 * random() ELSE 1 END AS span
FROM generate_series(1, 10000) AS u;

-- One row per entry, with a time in the window: from the start of the UTC
-- day 89 days ago until now (until `span` of the way, for refunding players).
CREATE TEMP TABLE seed_slots ON COMMIT DROP AS
WITH bounds AS (
    SELECT (date_trunc('day', now() AT TIME ZONE 'UTC') - INTERVAL '89 days') AT TIME ZONE 'UTC' AS since,
           now() - INTERVAL '1 minute' AS until
)
SELECT s.u, s.user_id, s.n, s.refunds, s.refund_by_apple,
       b.since + random() * s.span * (b.until - b.since) AS created_at
FROM seed_users s
CROSS JOIN bounds b
CROSS JOIN LATERAL generate_series(1, s.n) AS k;

-- Each entry's place in its player's ledger, and what kind it is: a
-- player's first entry is a credit, a refunding player's last is the
-- refund, the rest are mostly debits with some credits and grants.
CREATE TEMP TABLE seed_kinds ON COMMIT DROP AS
SELECT o.*,
       CASE WHEN o.j = 1 THEN 'credit'
            WHEN o.j = o.n AND o.refunds THEN 'refund'
            WHEN o.r < 0.17 THEN 'credit'
            WHEN o.r < 0.20 THEN 'grant'
            ELSE 'debit' END AS kind,
       random() AS r2,
       random() AS r3
FROM (SELECT sl.*,
             row_number() OVER (PARTITION BY sl.u ORDER BY sl.created_at)::INTEGER AS j,
             random() AS r
      FROM seed_slots sl) o;

-- Amounts of what comes in, and what has come in by each entry.
CREATE TEMP TABLE seed_incoming ON COMMIT DROP AS
SELECT k.*,
       CASE WHEN k.kind = 'credit' THEN
                CASE WHEN k.r2 < 0.6 THEN 'guodong600' WHEN k.r2 < 0.9 THEN 'guodong1200' ELSE 'guodong5000' END
       END AS product_id,
       CASE WHEN k.kind = 'credit' THEN
                CASE WHEN k.r2 < 0.6 THEN 600 WHEN k.r2 < 0.9 THEN 1200 ELSE 5000 END
            WHEN k.kind = 'grant' THEN 50 * (1 + floor(k.r2 * 10))::BIGINT
            ELSE 0 END::BIGINT AS incoming
FROM seed_kinds k;

CREATE TEMP TABLE seed_amounts ON COMMIT DROP AS
WITH running AS (
    SELECT i.*,
           sum(i.incoming) OVER (PARTITION BY i.u ORDER BY i.j) AS received,
           count(*) FILTER (WHERE i.kind = 'debit') OVER (PARTITION BY i.u) AS debits,
           -- The credit a refunding player's refund takes back: the last one.
           max(i.j) FILTER (WHERE i.kind = 'credit') OVER (PARTITION BY i.u) AS last_credit_j
    FROM seed_incoming i
)
SELECT r.*,
       CASE WHEN r.kind IN ('credit', 'grant') THEN r.incoming
            -- At most received / debits: all of a player's debits together
            -- never take more than came in before the last of them.
            WHEN r.kind = 'debit' THEN -(1 + floor(r.r3 * (r.received / r.debits - 1)))::BIGINT
            ELSE NULL END AS amount
FROM running r;

-- The refunds: the whole credit, or (one in three) part of it.
UPDATE seed_amounts a
SET amount = -(CASE WHEN a.r3 < 0.33 THEN c.incoming / 2 ELSE c.incoming END)
FROM seed_amounts c
WHERE a.kind = 'refund' AND c.u = a.u AND c.j = a.last_credit_j;

-- Ids from the entries' own sequence, handed out in time order.
CREATE TEMP TABLE seed_ids ON COMMIT DROP AS
SELECT row_number() OVER (ORDER BY v) AS rn, v AS id
FROM (SELECT nextval('wallet.entries_id_seq') AS v FROM generate_series(1, (SELECT count(*) FROM seed_amounts))) s;

CREATE TEMP TABLE seed_entries ON COMMIT DROP AS
SELECT i.id, a.u, a.user_id, a.j, a.n, a.kind, a.amount, a.product_id, a.refund_by_apple, a.created_at, a.r2,
       a.last_credit_j,
       sum(a.amount) OVER (PARTITION BY a.u ORDER BY a.j) AS balance_after,
       'seed-flow-' || lpad(a.u::TEXT, 5, '0') || '-' || lpad(a.j::TEXT, 2, '0') AS flow_no
FROM (SELECT a.*, row_number() OVER (ORDER BY a.created_at, a.u, a.j) AS rn FROM seed_amounts a) a
JOIN seed_ids i ON i.rn = a.rn;

INSERT INTO wallet.wallets (user_id, currency, balance, created_at, updated_at)
SELECT e.user_id, 'coin',
       (array_agg(e.balance_after ORDER BY e.j DESC))[1],
       min(e.created_at), max(e.created_at)
FROM seed_entries e
GROUP BY e.user_id
ORDER BY e.user_id;

INSERT INTO wallet.entries (id, user_id, currency, amount, balance_after, kind, reference, client, created_at, metadata)
SELECT e.id, e.user_id, 'coin', e.amount, e.balance_after, e.kind,
       CASE e.kind
           WHEN 'credit' THEN e.flow_no
           WHEN 'refund' THEN 'seed-flow-' || lpad(e.u::TEXT, 5, '0') || '-' || lpad(e.last_credit_j::TEXT, 2, '0')
           WHEN 'grant' THEN 'seed-grant-' || lpad(e.u::TEXT, 5, '0') || '-' || lpad(e.j::TEXT, 2, '0')
           ELSE 'seed-debit-' || lpad(e.u::TEXT, 5, '0') || '-' || lpad(e.j::TEXT, 2, '0')
       END,
       CASE e.kind
           WHEN 'credit' THEN 'seed-app-backend'
           WHEN 'debit' THEN 'seed-game-server'
           WHEN 'refund' THEN CASE WHEN e.refund_by_apple THEN 'appstore' ELSE 'admin' END
           ELSE 'admin'
       END,
       e.created_at,
       CASE e.kind
           WHEN 'debit' THEN
               jsonb_build_object('reason', (ARRAY['shop purchase', 'gacha pull', 'stamina refill', 'gift'])[1 + (e.j % 4)])
               || CASE WHEN e.j % 3 = 0
                       THEN jsonb_build_object('metadata', jsonb_build_object('item', 'item-' || (e.u * 31 + e.j) % 500,
                                                                              'level', e.j))
                       ELSE '{}'::JSONB END
           WHEN 'grant' THEN jsonb_build_object('operator', 'seed-support', 'reason', 'goodwill after an outage')
           WHEN 'refund' THEN
               CASE WHEN e.refund_by_apple
                    THEN jsonb_build_object('source', 'apple', 'operator', 'apple', 'reason', 'App Store refund')
                    ELSE jsonb_build_object('source', 'admin', 'operator', 'seed-support', 'reason', 'charged twice')
               END
       END
FROM seed_entries e
ORDER BY e.id;

-- The event each entry is told by, as wallet.post_entries writes it (and a
-- balance.negative after a refund that leaves the balance below zero), with
-- ids drawn from wallet.events_id_seq and given out in entry order.
DO $$ BEGIN PERFORM wallet.mark_event_writer(); END; $$;
CREATE TEMP TABLE seed_events ON COMMIT DROP AS
SELECT row_number() OVER (ORDER BY e.id, t.negative) AS n, t.type, e.user_id, e.currency,
       CASE WHEN t.negative THEN 0 ELSE e.amount END AS amount, e.balance_after, e.id AS entry_id,
       CASE WHEN e.kind IN ('credit', 'refund') THEN e.reference END AS flow_no, e.created_at,
       jsonb_build_object('client', e.client, 'reference', e.reference)
           || CASE WHEN t.negative THEN jsonb_build_object('cause', 'credit.refunded') ELSE coalesce(e.metadata, '{}') END
           AS data
FROM wallet.entries e
CROSS JOIN LATERAL (VALUES (FALSE, CASE e.kind WHEN 'credit' THEN 'credit.created' WHEN 'debit' THEN 'debit.created'
                                               WHEN 'refund' THEN 'credit.refunded' ELSE 'grant.created' END),
                           (TRUE, 'balance.negative')) t (negative, type)
WHERE e.user_id LIKE 'seed-user-%' AND (NOT t.negative OR (e.amount < 0 AND e.balance_after < 0));

INSERT INTO wallet.events (id, type, user_id, currency, amount, balance_after, held, available, entry_id, flow_no,
                           created_at, data)
SELECT i.ids[v.n], v.type, v.user_id, v.currency, v.amount, v.balance_after, 0, v.balance_after, v.entry_id, v.flow_no,
       v.created_at, v.data
FROM seed_events v,
     (SELECT ARRAY(SELECT nextval('wallet.events_id_seq') FROM generate_series(1, (SELECT count(*) FROM seed_events)))
             AS ids) i;

INSERT INTO wallet.credits (flow_no, user_id, product_id, quantity, currency, amount, status, source, environment,
                            client, entry_id, refunded_by, refunded_amount, created_at, updated_at)
SELECT c.flow_no, c.user_id, c.product_id, 1, 'coin', c.amount,
       CASE WHEN r.id IS NULL THEN 'credited' ELSE 'refunded' END,
       CASE WHEN c.u % 3 = 0 THEN 'appstore-jws' ELSE 'caller' END,
       CASE WHEN c.u % 3 = 0 THEN 'Production' END,
       'seed-app-backend', c.id,
       CASE WHEN r.id IS NULL THEN NULL WHEN r.refund_by_apple THEN 'apple' ELSE 'admin' END,
       -r.amount,
       c.created_at, coalesce(r.created_at, c.created_at)
FROM seed_entries c
LEFT JOIN seed_entries r ON r.kind = 'refund' AND r.u = c.u AND r.last_credit_j = c.j
WHERE c.kind = 'credit'
ORDER BY c.id;

-- What an operator's grants and refunds leave in the audit trail, and what
-- Apple's refunds leave among the notifications.
INSERT INTO wallet.admin_audit (action, operator, db_user, reason, arguments, outcome, entry_ids, created_at)
SELECT a.action, 'seed-support', 'postgres', a.reason, a.arguments, a.outcome, ARRAY[a.id], a.created_at
FROM (SELECT e.id, e.created_at, 'grant' AS action, 'goodwill after an outage' AS reason, 'granted' AS outcome,
             jsonb_build_object('user_id', e.user_id, 'amount', e.amount, 'currency', 'coin',
                                'reference', 'seed-grant-' || lpad(e.u::TEXT, 5, '0') || '-' || lpad(e.j::TEXT, 2, '0'),
                                'allow_negative', FALSE) AS arguments
      FROM seed_entries e WHERE e.kind = 'grant'
      UNION ALL
      SELECT e.id, e.created_at, 'refund', 'charged twice', 'refunded',
             jsonb_build_object('flow_no', 'seed-flow-' || lpad(e.u::TEXT, 5, '0') || '-' || lpad(e.last_credit_j::TEXT, 2, '0'),
                                'amount', -e.amount)
      FROM seed_entries e WHERE e.kind = 'refund' AND NOT e.refund_by_apple) a
ORDER BY a.created_at;

CREATE TEMP TABLE seed_notifications ON COMMIT DROP AS
SELECT md5('seed-notification-' || e.id) AS hex, e.id, e.created_at,
       'seed-flow-' || lpad(e.u::TEXT, 5, '0') || '-' || lpad(e.last_credit_j::TEXT, 2, '0') AS flow_no
FROM seed_entries e
WHERE e.kind = 'refund' AND e.refund_by_apple;

INSERT INTO wallet.appstore_notifications (notification_uuid, notification_type, subtype, flow_no, environment,
                                           signed_date, outcome, entry_id, payload, received_at)
SELECT substr(n.hex, 1, 8) || '-' || substr(n.hex, 9, 4) || '-4' || substr(n.hex, 14, 3) || '-a'
           || substr(n.hex, 18, 3) || '-' || substr(n.hex, 21, 12),
       'REFUND', NULL, n.flow_no, 'Production', n.created_at - INTERVAL '5 seconds', 'refunded', n.id,
       jsonb_build_object('notificationType', 'REFUND', 'transactionId', n.flow_no, 'environment', 'Production'),
       n.created_at
FROM seed_notifications n
ORDER BY n.created_at;

INSERT INTO wallet.appstore_refund_states (flow_no, notification_type, signed_date, notification_uuid, updated_at)
SELECT n.flow_no, n.notification_type, n.signed_date, n.notification_uuid, n.received_at
FROM wallet.appstore_notifications n
JOIN seed_notifications s ON s.flow_no = n.flow_no;

-- Lots: the seeded books are those of a database that moved to lots after
-- them (Migrations/0026_lots.sql): each seeded balance above zero is opening
-- lots, paid as far as the player's credits net of refunds account for it
-- and free for the rest, and the entry invariant starts after the seed.
INSERT INTO wallet.lots (user_id, currency, source, paid, amount, remaining, created_at)
SELECT o.user_id, 'coin', o.source, o.source = 'purchase', o.amount, o.amount, o.opened_at
FROM (
    SELECT w.user_id, w.updated_at AS opened_at, s.source,
           CASE s.source WHEN 'purchase' THEN least(w.balance, greatest(0, p.bought))
                         ELSE w.balance - least(w.balance, greatest(0, p.bought)) END AS amount
    FROM wallet.wallets w
    JOIN (SELECT e.user_id, coalesce(sum(e.amount) FILTER (WHERE e.kind IN ('credit', 'refund')), 0) AS bought
          FROM seed_entries e GROUP BY e.user_id) p ON p.user_id = w.user_id
    CROSS JOIN (VALUES ('purchase'), ('grant')) s (source)
    WHERE w.balance > 0
) o
WHERE o.amount > 0
ORDER BY o.user_id, o.source DESC;
UPDATE wallet.lot_settings SET first_entry_id = (SELECT max(e.id) + 1 FROM seed_entries e);

COMMIT;

ANALYZE wallet.wallets;
ANALYZE wallet.entries;
ANALYZE wallet.credits;
ANALYZE wallet.admin_audit;
ANALYZE wallet.appstore_notifications;

\set QUIET off
SELECT count(*) AS seeded_users,
       (SELECT count(*) FROM wallet.entries WHERE user_id LIKE 'seed-user-%') AS seeded_entries,
       (SELECT count(*) FROM wallet.credits WHERE flow_no LIKE 'seed-flow-%') AS seeded_credits
FROM wallet.wallets WHERE user_id LIKE 'seed-user-%';
