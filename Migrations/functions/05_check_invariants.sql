-- wallet.check_invariants and the rules it runs (wallet.invariant_violations),
-- re-applied by the migrator whenever this file changes (first defined in
-- 0003_admin_and_invariants.sql). `wallet check --full`,
-- Scripts/admin/check.sql and the tests read it, and the incremental check
-- (21_incremental_check.sql) runs the same rules over what changed; with
-- wallet.unreversed_refunds, which it shares with the refunds.

-- A credit's refund entries in one currency that no reversal has undone
-- yet: those since its last `refund_reversal` in that currency, counting
-- only entries before `p_before` when given. The refunds, their reversals
-- (Migrations/functions/09_refund_credit.sql) and the checks below read it;
-- it is here because a SQL function's body is checked when it is made.
CREATE OR REPLACE FUNCTION wallet.unreversed_refunds(p_flow_no TEXT, p_currency TEXT, p_before BIGINT DEFAULT NULL)
RETURNS SETOF wallet.entries
LANGUAGE sql STABLE AS $$
    SELECT r.* FROM wallet.entries r
    WHERE r.reference = p_flow_no AND r.kind = 'refund' AND r.currency = p_currency
      AND r.id < coalesce(p_before, 9223372036854775807)
      AND r.id > coalesce((SELECT max(x.id) FROM wallet.entries x
                           WHERE x.reference = p_flow_no AND x.kind = 'refund_reversal' AND x.currency = p_currency
                             AND x.id < coalesce(p_before, 9223372036854775807)), 0)
$$;

-- The rules of the books, each restricted to a scope: the wallets of
-- `p_users` in `p_currencies` (every pair of the two), the entries
-- `p_entries`, the credits `p_flow_nos`, the holds `p_holds` and the lots
-- `p_lots`, and the idempotency records written at or after `p_since`
-- (with one of the entries). A NULL argument is everything, so with none
-- given this is the full check (wallet.check_invariants), and
-- wallet.check_changes (Migrations/functions/21_incremental_check.sql)
-- passes what was written since its checkpoint. Every restriction is an
-- `IS NULL OR` on an argument: the caller passes constants (a one-off
-- plan), the planner inlines this function, folds each test away and
-- uses the index the restriction names, so the full check's plan is the
-- one it always was.
--
-- `p_events_after`, given with the entries of the events after it, keeps
-- the check's cost to what was written since: a wallet's balance is
-- compared with what its entry before the given ones left plus what came
-- since, and each given entry's balance_after with its wallet's entry
-- before it (the full check's sum and running sum, from the checkpoint), entries are matched to events after it only, and a
-- lot's whole history (lot_matches_its_entries) is left to the full
-- check. What this cannot see is a row changed before the checkpoint.
CREATE OR REPLACE FUNCTION wallet.invariant_violations(
    p_users TEXT[] DEFAULT NULL, p_currencies TEXT[] DEFAULT NULL, p_entries BIGINT[] DEFAULT NULL,
    p_flow_nos TEXT[] DEFAULT NULL, p_holds BIGINT[] DEFAULT NULL, p_lots BIGINT[] DEFAULT NULL,
    p_since TIMESTAMPTZ DEFAULT NULL, p_events_after BIGINT DEFAULT NULL)
RETURNS TABLE (invariant TEXT, subject TEXT, detail TEXT)
LANGUAGE sql STABLE AS $$
    -- A wallet's balance is the sum of its entries.
    SELECT 'balance_matches_ledger', w.user_id || '/' || w.currency,
           format('balance %s, ledger sum %s', w.balance, coalesce(s.total, 0))
    FROM wallet.wallets w
    LEFT JOIN (SELECT e.user_id, e.currency, sum(e.amount) AS total
               FROM wallet.entries e WHERE (p_users IS NULL OR (e.user_id = ANY (p_users) AND e.currency = ANY (p_currencies))) GROUP BY e.user_id, e.currency) s
      ON s.user_id = w.user_id AND s.currency = w.currency
    WHERE p_events_after IS NULL
      AND (p_users IS NULL OR (w.user_id = ANY (p_users) AND w.currency = ANY (p_currencies))) AND w.balance <> coalesce(s.total, 0)
    UNION ALL
    -- The same since a checkpoint, for each wallet the given entries
    -- moved: what its entry before the first of them left, plus every
    -- entry of it from there on.
    SELECT 'balance_matches_ledger', w.user_id || '/' || w.currency,
           format('balance %s, ledger sum %s', w.balance, coalesce(o.balance_after, 0) + n.total)
    FROM (SELECT e.user_id, e.currency, min(e.id) AS first FROM wallet.entries e
          WHERE p_events_after IS NOT NULL AND e.id = ANY (p_entries) GROUP BY e.user_id, e.currency) f
    JOIN wallet.wallets w ON w.user_id = f.user_id AND w.currency = f.currency
    CROSS JOIN LATERAL (SELECT sum(x.amount) AS total FROM wallet.entries x
                        WHERE x.user_id = f.user_id AND x.currency = f.currency AND x.id >= f.first) n
    LEFT JOIN LATERAL (SELECT x.balance_after FROM wallet.entries x
                       WHERE x.user_id = f.user_id AND x.currency = f.currency AND x.id < f.first
                       ORDER BY x.id DESC LIMIT 1) o ON TRUE
    WHERE w.balance <> coalesce(o.balance_after, 0) + n.total
    UNION ALL
    -- Every entry belongs to a wallet.
    SELECT 'entry_has_wallet', e.user_id || '/' || e.currency, format('entry %s has no wallet', e.id)
    FROM wallet.entries e
    WHERE (p_entries IS NULL OR e.id = ANY (p_entries))
      AND NOT EXISTS (SELECT 1 FROM wallet.wallets w WHERE w.user_id = e.user_id AND w.currency = e.currency)
    UNION ALL
    -- balance_after values chain along id order, and end at the balance.
    SELECT 'balance_after_chain', c.user_id || '/' || c.currency,
           format('entry %s: balance_after %s, expected %s', c.id, c.balance_after, c.expected)
    FROM (SELECT e.id, e.user_id, e.currency, e.balance_after,
                 sum(e.amount) OVER (PARTITION BY e.user_id, e.currency ORDER BY e.id) AS expected
          FROM wallet.entries e WHERE (p_users IS NULL OR (e.user_id = ANY (p_users) AND e.currency = ANY (p_currencies)))) c
    WHERE p_events_after IS NULL AND c.balance_after <> c.expected
    UNION ALL
    -- The same since a checkpoint, one step at a time from the entry before.
    SELECT 'balance_after_chain', e.user_id || '/' || e.currency,
           format('entry %s: balance_after %s, expected %s', e.id, e.balance_after, coalesce(b.balance_after, 0) + e.amount)
    FROM wallet.entries e
    LEFT JOIN LATERAL (SELECT x.balance_after FROM wallet.entries x
                       WHERE x.user_id = e.user_id AND x.currency = e.currency AND x.id < e.id
                       ORDER BY x.id DESC LIMIT 1) b ON TRUE
    WHERE p_events_after IS NOT NULL AND e.id = ANY (p_entries) AND e.balance_after <> coalesce(b.balance_after, 0) + e.amount
    UNION ALL
    -- Each credit has exactly its one credit entry, for its stored amount.
    SELECT 'credit_has_one_entry', cr.flow_no,
           format('credit entry %s does not match the credit', cr.entry_id)
    FROM wallet.credits cr
    LEFT JOIN wallet.entries e ON e.id = cr.entry_id
    WHERE (p_flow_nos IS NULL OR cr.flow_no = ANY (p_flow_nos))
      AND (e.id IS NULL OR e.kind <> 'credit' OR e.reference <> cr.flow_no OR e.amount <> cr.amount
           OR e.user_id <> cr.user_id OR e.currency <> cr.currency)
    UNION ALL
    SELECT 'credit_entry_has_credit', e.reference, format('credit entry %s has no credit row', e.id)
    FROM wallet.entries e
    LEFT JOIN wallet.credits cr ON cr.entry_id = e.id
    LEFT JOIN wallet.credit_lines cl ON cl.entry_id = e.id
    WHERE (p_entries IS NULL OR e.id = ANY (p_entries)) AND e.kind = 'credit' AND cr.flow_no IS NULL AND cl.flow_no IS NULL
    UNION ALL
    -- Each of a credit's other lines has its one credit entry, in the
    -- line's currency, to the credit's player, for the line's amount; its
    -- refunded_amount is what its refunds since the last reversal took;
    -- and it was refunded last exactly when something of it is refunded.
    SELECT 'credit_line_matches_ledger', cl.flow_no,
           format('line %s: entry %s, refunded_amount %s, refund entries %s, shortfalls %s, last %s', cl.currency,
                  cl.entry_id, cl.refunded_amount, -r.took, r.shortfall, coalesce(t.kind, 'none'))
    FROM wallet.credit_lines cl
    JOIN wallet.credits cr ON cr.flow_no = cl.flow_no
    LEFT JOIN wallet.entries e ON e.id = cl.entry_id
    CROSS JOIN LATERAL (SELECT coalesce(sum(u.amount), 0) AS took, coalesce(sum(f.amount), 0) AS shortfall
                        FROM wallet.unreversed_refunds(cl.flow_no, cl.currency) u
                        LEFT JOIN wallet.refund_shortfalls f ON f.entry_id = u.id) r
    LEFT JOIN LATERAL (SELECT x.kind FROM wallet.entries x
                       WHERE x.reference = cl.flow_no AND x.currency = cl.currency
                         AND x.kind IN ('refund', 'refund_reversal')
                       ORDER BY x.id DESC LIMIT 1) t ON TRUE
    WHERE (p_flow_nos IS NULL OR cl.flow_no = ANY (p_flow_nos))
      AND (e.id IS NULL OR e.kind <> 'credit' OR e.reference <> cl.flow_no OR e.currency <> cl.currency
           OR e.user_id <> cr.user_id OR e.amount <> cl.amount OR e.currency = cr.currency
           OR cl.refunded_amount <> -r.took + r.shortfall
           OR (cl.refunded_amount > 0) <> (t.kind IS NOT DISTINCT FROM 'refund'))
    UNION ALL
    -- A credit's refund entries in each currency start with a refund, and
    -- each reversal follows a refund (Google's partial refunds come one
    -- after another; a reversal undoes Apple's one refund), and the status
    -- says which came last.
    SELECT 'refunds_alternate', r.reference, format('entry %s (%s) is out of turn', r.id, r.kind)
    FROM (SELECT e.id, e.kind, e.reference,
                 lag(e.kind) OVER (PARTITION BY e.reference, e.currency ORDER BY e.id) AS previous
          FROM wallet.entries e
          WHERE e.kind IN ('refund', 'refund_reversal') AND (p_flow_nos IS NULL OR e.reference = ANY (p_flow_nos))) r
    WHERE (r.previous IS NULL AND r.kind <> 'refund') OR (r.previous = 'refund_reversal' AND r.kind = 'refund_reversal')
    UNION ALL
    -- A refunded credit's refunded_amount is what its refunds (in its own
    -- currency) since the last reversal took, never more than the credit.
    SELECT 'refunded_amount_matches_ledger', cr.flow_no,
           format('refunded_amount %s, refund entries %s, shortfalls %s', cr.refunded_amount,
                  coalesce(-sum(e.amount), 0), coalesce(sum(f.amount), 0))
    FROM wallet.credits cr
    LEFT JOIN LATERAL wallet.unreversed_refunds(cr.flow_no, cr.currency) e ON TRUE
    LEFT JOIN wallet.refund_shortfalls f ON f.entry_id = e.id
    WHERE (p_flow_nos IS NULL OR cr.flow_no = ANY (p_flow_nos)) AND cr.status IN ('refunded', 'partially_refunded')
    GROUP BY cr.flow_no, cr.refunded_amount, cr.amount
    HAVING cr.refunded_amount IS DISTINCT FROM coalesce(-sum(e.amount), 0) + coalesce(sum(f.amount), 0)
        OR cr.refunded_amount > cr.amount
    UNION ALL
    -- A shortfall belongs to its refund entry, and a refund that took
    -- nothing has one (refunds under WALLET_REFUND_DEBT=floor).
    SELECT 'shortfall_has_refund', coalesce(e.reference, f.flow_no),
           format('refund entry %s took %s, shortfall %s', coalesce(e.id, f.entry_id), e.amount, f.amount)
    FROM (SELECT y.* FROM wallet.refund_shortfalls y WHERE (p_flow_nos IS NULL OR y.flow_no = ANY (p_flow_nos))) f
    FULL JOIN (SELECT x.* FROM wallet.entries x WHERE (p_entries IS NULL OR x.id = ANY (p_entries)) AND x.kind = 'refund' AND x.amount = 0) e
      ON e.id = f.entry_id
    LEFT JOIN wallet.entries r ON r.id = f.entry_id
    WHERE f.entry_id IS NULL
       OR r.id IS NULL OR r.kind <> 'refund' OR r.reference <> f.flow_no OR r.user_id <> f.user_id
       OR r.currency <> f.currency
    UNION ALL
    -- A bonus comes with its credit: one at most per flowNO, to the
    -- credit's player.
    SELECT 'bonus_has_credit', e.reference, format('%s bonus entries, credit %s', count(*), min(cr.flow_no))
    FROM wallet.entries e
    LEFT JOIN wallet.credits cr ON cr.flow_no = e.reference AND cr.user_id = e.user_id
    WHERE (p_users IS NULL OR (e.user_id = ANY (p_users) AND e.currency = ANY (p_currencies))) AND e.kind = 'bonus'
    GROUP BY e.reference
    HAVING count(*) > 1 OR count(cr.flow_no) <> count(*)
    UNION ALL
    SELECT 'refund_entry_has_credit', e.reference, format('entry %s refers to no credit of that wallet', e.id)
    FROM wallet.entries e
    LEFT JOIN wallet.credits cr ON cr.flow_no = e.reference AND cr.user_id = e.user_id
        AND (cr.currency = e.currency OR EXISTS (SELECT FROM wallet.credit_lines l
                                                 WHERE l.flow_no = cr.flow_no AND l.currency = e.currency))
    WHERE (p_entries IS NULL OR e.id = ANY (p_entries)) AND e.kind IN ('refund', 'refund_reversal') AND cr.flow_no IS NULL
    UNION ALL
    SELECT 'credit_status_matches_ledger', cr.flow_no,
           format('status %s, last refund entry %s', cr.status, coalesce(l.kind, 'none'))
    FROM wallet.credits cr
    LEFT JOIN LATERAL (SELECT e.kind FROM wallet.entries e
                       WHERE e.reference = cr.flow_no AND e.currency = cr.currency
                         AND e.kind IN ('refund', 'refund_reversal')
                       ORDER BY e.id DESC LIMIT 1) l ON TRUE
    WHERE (p_flow_nos IS NULL OR cr.flow_no = ANY (p_flow_nos)) AND (cr.status IN ('refunded', 'partially_refunded')) <> (l.kind IS NOT DISTINCT FROM 'refund')
    UNION ALL
    -- A balance goes below zero only through a refund or an allowed revoke.
    SELECT 'negative_only_by_refund_or_allowed_revoke', e.user_id || '/' || e.currency,
           format('entry %s (%s) left balance %s', e.id, e.kind, e.balance_after)
    FROM wallet.entries e
    WHERE (p_entries IS NULL OR e.id = ANY (p_entries)) AND e.amount < 0 AND e.balance_after < 0 AND NOT (
        e.kind = 'refund' OR (e.kind = 'revoke' AND (e.metadata ->> 'allow_negative')::BOOLEAN IS TRUE))
    UNION ALL
    -- Each stored debit outcome points at its entry, for its amount, and
    -- the balance its answer gave is the entry's.
    SELECT 'debit_key_has_entry', k.client || '/' || k.key, format('entry %s does not match', k.entry_id)
    FROM wallet.idempotency_keys k
    LEFT JOIN wallet.entries e ON e.id = k.entry_id
    WHERE (p_entries IS NULL OR (k.entry_id = ANY (p_entries) AND k.created_at >= p_since)) AND k.outcome = 'debited'
      AND (e.id IS NULL OR e.kind <> 'debit' OR e.reference <> k.key OR e.client <> k.client
           OR -e.amount <> k.amount OR k.balance <> e.balance_after)
    UNION ALL
    -- The same for a stored grant (POST /v1/grants).
    SELECT 'grant_key_has_entry', k.client || '/' || k.key, format('entry %s does not match', k.entry_id)
    FROM wallet.idempotency_keys k
    LEFT JOIN wallet.entries e ON e.id = k.entry_id
    WHERE (p_entries IS NULL OR (k.entry_id = ANY (p_entries) AND k.created_at >= p_since)) AND k.outcome = 'granted'
      AND (e.id IS NULL OR e.kind <> 'grant' OR e.reference <> k.key OR e.client <> k.client
           OR e.amount <> k.amount OR k.balance <> e.balance_after)
    UNION ALL
    -- The same for a stored capture, whose entry names its hold.
    SELECT 'capture_key_has_entry', k.client || '/' || k.key, format('entry %s does not match', k.entry_id)
    FROM wallet.idempotency_keys k
    LEFT JOIN wallet.entries e ON e.id = k.entry_id
    WHERE (p_entries IS NULL OR (k.entry_id = ANY (p_entries) AND k.created_at >= p_since)) AND k.outcome = 'captured'
      AND (e.id IS NULL OR e.kind <> 'debit' OR e.reference <> 'hold:' || k.hold_id
           OR -e.amount <> k.amount OR k.balance <> e.balance_after)
    UNION ALL
    -- A wallet's held is the sum of its holds that are held.
    SELECT 'held_matches_holds', w.user_id || '/' || w.currency,
           format('held %s, holds sum %s', w.held, coalesce(s.total, 0))
    FROM wallet.wallets w
    LEFT JOIN (SELECT h.user_id, h.currency, sum(h.amount) AS total FROM wallet.holds h
               WHERE (p_users IS NULL OR (h.user_id = ANY (p_users) AND h.currency = ANY (p_currencies))) AND h.status = 'held' GROUP BY h.user_id, h.currency) s
      ON s.user_id = w.user_id AND s.currency = w.currency
    WHERE (p_users IS NULL OR (w.user_id = ANY (p_users) AND w.currency = ANY (p_currencies))) AND w.held <> coalesce(s.total, 0)
    UNION ALL
    -- A capture takes at most its hold, through its one debit entry.
    SELECT 'capture_within_hold', 'hold:' || h.id,
           format('captured %s of %s, entry %s', h.captured_amount, h.amount, h.entry_id)
    FROM wallet.holds h
    LEFT JOIN wallet.entries e ON e.id = h.entry_id
    WHERE (p_holds IS NULL OR h.id = ANY (p_holds)) AND h.status = 'captured'
      AND (h.captured_amount > h.amount OR e.id IS NULL OR e.kind <> 'debit' OR e.reference <> 'hold:' || h.id
           OR -e.amount <> h.captured_amount OR e.user_id <> h.user_id OR e.currency <> h.currency)
    UNION ALL
    -- Each entry since the first one an event tells (older ones were
    -- written before events, or their events are past retention) is told
    -- by one event, with its amount and balance.
    SELECT 'entry_has_event', e.user_id || '/' || e.currency,
           format('entry %s is told by %s matching events', e.id, count(v.id))
    FROM wallet.entries e
    LEFT JOIN (SELECT y.* FROM wallet.events y WHERE (p_users IS NULL OR (y.user_id = ANY (p_users) AND y.currency = ANY (p_currencies)))
                                                   AND (p_events_after IS NULL OR y.id > p_events_after)) v
      ON v.entry_id = e.id AND v.type <> 'balance.negative' AND v.amount = e.amount
     AND v.balance_after = e.balance_after AND v.user_id = e.user_id
    -- (Entries passed in are told by events by the caller's choice.)
    WHERE (p_entries IS NULL OR e.id = ANY (p_entries))
      AND (p_entries IS NOT NULL OR e.id >= (SELECT min(x.entry_id) FROM wallet.events x))
    GROUP BY e.id, e.user_id, e.currency
    HAVING count(v.id) <> 1
    UNION ALL
    -- A wallet's last event shows the wallet as it is.
    SELECT 'events_end_at_wallet', w.user_id || '/' || w.currency,
           format('balance %s and held %s, last event %s says %s and %s', w.balance, w.held, l.id, l.balance_after,
                  l.held)
    FROM wallet.wallets w
    JOIN LATERAL (SELECT v.id, v.balance_after, v.held FROM wallet.events v
                  WHERE v.user_id = w.user_id AND v.currency = w.currency ORDER BY v.id DESC LIMIT 1) l ON TRUE
    WHERE (p_users IS NULL OR (w.user_id = ANY (p_users) AND w.currency = ANY (p_currencies))) AND (l.balance_after, l.held) <> (w.balance, w.held)
    UNION ALL
    -- A wallet's lots hold its balance, less its debt (Migrations/0026_lots.sql).
    SELECT 'lots_hold_balance', w.user_id || '/' || w.currency,
           format('balance %s, lots hold %s', w.balance, coalesce(l.total, 0))
    FROM wallet.wallets w
    LEFT JOIN (SELECT l.user_id, l.currency, sum(l.remaining) AS total FROM wallet.lots l
               WHERE (p_users IS NULL OR (l.user_id = ANY (p_users) AND l.currency = ANY (p_currencies))) AND l.open GROUP BY l.user_id, l.currency) l
      ON l.user_id = w.user_id AND l.currency = w.currency
    WHERE (p_users IS NULL OR (w.user_id = ANY (p_users) AND w.currency = ANY (p_currencies))) AND greatest(0, w.balance) <> coalesce(l.total, 0)
    UNION ALL
    -- A lot holds what its entries made, refilled and took (an opening lot
    -- starts with its amount), all in its own wallet.
    SELECT 'lot_matches_its_entries', 'lot:' || l.id,
           format('remaining %s, amount %s, moves %s', l.remaining, l.amount, coalesce(m.total, 0))
    FROM wallet.lots l
    LEFT JOIN (SELECT t.lot_id, sum(t.amount) AS total, bool_and(e.user_id IS NOT NULL) AS own,
                      count(*) FILTER (WHERE t.entry_id = x.entry_id AND t.amount = x.amount) AS making
               FROM wallet.entry_lots t
               JOIN wallet.lots x ON x.id = t.lot_id
               LEFT JOIN wallet.entries e ON e.id = t.entry_id AND e.user_id = x.user_id AND e.currency = x.currency
               WHERE (p_lots IS NULL OR t.lot_id = ANY (p_lots))
               GROUP BY t.lot_id) m ON m.lot_id = l.id
    WHERE p_events_after IS NULL AND (p_lots IS NULL OR l.id = ANY (p_lots))
      AND (l.remaining <> coalesce(m.total, 0) + CASE WHEN l.entry_id IS NULL THEN l.amount ELSE 0 END
           OR NOT coalesce(m.own, TRUE) OR (l.entry_id IS NOT NULL AND coalesce(m.making, 0) <> 1))
    UNION ALL
    -- Each entry since lots exist moved its lots by what it added or took
    -- above the debt line.
    SELECT 'entry_moves_its_lots', e.user_id || '/' || e.currency,
           format('entry %s moved lots by %s, expected %s', e.id, coalesce(sum(t.amount), 0), e.lot_delta)
    FROM (SELECT x.id, x.user_id, x.currency, greatest(0, x.balance_after) - greatest(0, x.balance_after - x.amount) AS lot_delta FROM wallet.entries x
          WHERE (p_entries IS NULL OR x.id = ANY (p_entries)) AND x.id >= (SELECT s.first_entry_id FROM wallet.lot_settings s)) e
    LEFT JOIN (SELECT y.* FROM wallet.entry_lots y
               WHERE p_entries IS NULL OR (y.entry_id = ANY (p_entries)
                                           AND y.entry_id >= (SELECT min(i) FROM unnest(p_entries) i))) t
      ON t.entry_id = e.id
    GROUP BY e.id, e.user_id, e.currency, e.lot_delta
    HAVING coalesce(sum(t.amount), 0) <> e.lot_delta
    ORDER BY 1, 2, 3;
$$;

-- Every broken rule of the books, one row each; none when they balance.
CREATE OR REPLACE FUNCTION wallet.check_invariants()
RETURNS TABLE (invariant TEXT, subject TEXT, detail TEXT)
LANGUAGE sql STABLE AS $$
    SELECT v.invariant, v.subject, v.detail FROM wallet.invariant_violations() v
$$;
