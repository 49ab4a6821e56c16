-- wallet.report, wallet.breakage, wallet.paid_balance and
-- wallet.player_events (Scripts/admin/report.sql, breakage.sql,
-- paid-balance.sql and events.sql), re-applied by the
-- migrator whenever this file changes (the report first defined in
-- 0003_admin_and_invariants.sql).

-- Credits, refunds, debits and net coins per product and per day, for finance.
CREATE OR REPLACE FUNCTION wallet.report(p_since TIMESTAMPTZ DEFAULT '-infinity')
RETURNS TABLE (day DATE, product_id TEXT, currency TEXT, credits BIGINT, credited BIGINT,
               refunds BIGINT, refunded BIGINT, debits BIGINT, debited BIGINT, net BIGINT)
LANGUAGE sql STABLE AS $$
    SELECT (e.created_at AT TIME ZONE 'UTC')::DATE AS day,
           coalesce(cr.product_id, CASE WHEN e.kind = 'debit' THEN '(debits)' ELSE '(' || e.kind || ')' END),
           e.currency,
           count(*) FILTER (WHERE e.kind = 'credit'),
           coalesce(sum(e.amount) FILTER (WHERE e.kind = 'credit'), 0),
           count(*) FILTER (WHERE e.kind = 'refund'),
           coalesce(-sum(e.amount) FILTER (WHERE e.kind = 'refund'), 0),
           count(*) FILTER (WHERE e.kind = 'debit'),
           coalesce(-sum(e.amount) FILTER (WHERE e.kind = 'debit'), 0),
           sum(e.amount)
    FROM wallet.entries e
    LEFT JOIN wallet.credits cr ON cr.flow_no = e.reference AND e.kind IN ('credit', 'refund', 'refund_reversal')
    WHERE e.created_at >= p_since
    GROUP BY 1, 2, 3
    ORDER BY 1, 2, 3;
$$;

-- Breakage: coins that expired unspent, per UTC month and currency, from
-- the ledger's `expire` entries (each is coins past their lot's expiry
-- taken out of a balance), with how many players lost some.
CREATE OR REPLACE FUNCTION wallet.breakage(p_since TIMESTAMPTZ DEFAULT '-infinity')
RETURNS TABLE (month TEXT, currency TEXT, expired BIGINT, entries BIGINT, players BIGINT)
LANGUAGE sql STABLE AS $$
    SELECT to_char(e.created_at AT TIME ZONE 'UTC', 'YYYY-MM'), e.currency, -sum(e.amount)::BIGINT, count(*),
           count(DISTINCT e.user_id)
    FROM wallet.entries e
    WHERE e.kind = 'expire' AND e.created_at >= p_since
    GROUP BY 1, 2
    ORDER BY 1, 2;
$$;

-- Unused paid currency as of an instant, per currency: the coins of paid
-- lots (store purchases) not yet spent, refunded or otherwise taken at
-- `p_as_of`, replayed from the ledger's lot moves (wallet.entry_lots, by
-- their entries' time) rather than read from the lots as they are now.
-- Held coins are unused. `wallets` counts the wallets that held some.
--
-- Exact from the upgrade that made lots (0026_lots.sql) on: an opening lot
-- stands for its wallet's balance after the last entry written before
-- lots, so an instant before that entry raises WL003.
CREATE OR REPLACE FUNCTION wallet.paid_balance(p_as_of TIMESTAMPTZ)
RETURNS TABLE (currency TEXT, paid BIGINT, wallets BIGINT)
LANGUAGE plpgsql STABLE AS $$
DECLARE
    v_before_lots TIMESTAMPTZ := (SELECT max(e.created_at) FROM wallet.entries e
                                  WHERE e.id < (SELECT s.first_entry_id FROM wallet.lot_settings s));
BEGIN
    IF p_as_of IS NULL OR p_as_of < v_before_lots THEN
        RAISE EXCEPTION 'paid balances are exact from % (the last entry before lots) on; % is earlier',
            v_before_lots, p_as_of USING ERRCODE = 'WL003';
    END IF;
    RETURN QUERY
    SELECT c.code::TEXT, coalesce(sum(h.held), 0)::BIGINT, count(h.held) FILTER (WHERE h.held > 0)
    FROM wallet.currencies c
    LEFT JOIN (SELECT l.user_id, l.currency, sum(l.held)::BIGINT AS held
               FROM (SELECT x.user_id, x.currency,
                            CASE WHEN x.entry_id IS NULL THEN x.amount ELSE 0 END
                            + coalesce((SELECT sum(t.amount) FROM wallet.entry_lots t
                                        JOIN wallet.entries e ON e.id = t.entry_id
                                        WHERE t.lot_id = x.id AND e.created_at <= p_as_of), 0) AS held
                     FROM wallet.lots x
                     WHERE x.paid) l
               GROUP BY l.user_id, l.currency) h ON h.currency = c.code
    GROUP BY c.code
    ORDER BY c.code;
END;
$$;

-- A player's events, newest first (Scripts/admin/events.sql, the console).
CREATE OR REPLACE FUNCTION wallet.player_events(p_user_id TEXT, p_type TEXT DEFAULT NULL, p_limit INTEGER DEFAULT 100)
RETURNS TABLE (id BIGINT, type TEXT, currency TEXT, amount BIGINT, balance_after BIGINT, held BIGINT,
               available BIGINT, entry_id BIGINT, hold_id BIGINT, flow_no TEXT, created_at TEXT)
LANGUAGE sql STABLE AS $$
    SELECT e.id, e.type, e.currency, e.amount, e.balance_after, e.held, e.available, e.entry_id, e.hold_id, e.flow_no,
           wallet.rfc3339(e.created_at)
    FROM wallet.events e
    WHERE e.user_id = p_user_id AND (p_type IS NULL OR e.type = p_type)
    ORDER BY e.id DESC
    LIMIT greatest(p_limit, 1);
$$;
