-- wallet.refund_risk, re-applied by the migrator whenever this file
-- changes. Scripts/admin/refunds.sql reads it.

-- Who had refunds lately: one row per wallet (user and currency) with at
-- least one `refund` entry in the window, i.e. written in the last
-- `p_days` × 24 hours (created_at >= now() - p_days days, now() being the
-- start of the calling transaction). A window reaching back further than
-- PostgreSQL's calendar covers all time. It only reads.
--
--   refunds               refund entries in the window (a refund Apple
--                         later reversed still counts: it was asked for)
--   refunded              coins those entries took, as a positive number
--   purchases             credit entries in the window
--   balance               the wallet's balance now
--   consumption_answered  App Store consumption requests about the wallet's
--                         credits that were answered (status 'sent') in the
--                         window, by sent_at; pending and failed ones are
--                         not counted
--
-- Wallets with a negative balance come first, then by refunded coins and
-- refund count, both descending, then by user and currency. `p_days` below
-- 1 (or NULL) raises WL003.
CREATE OR REPLACE FUNCTION wallet.refund_risk(p_days INTEGER)
RETURNS TABLE (user_id TEXT, currency TEXT, refunds BIGINT, refunded BIGINT, purchases BIGINT,
               balance BIGINT, consumption_answered BIGINT)
LANGUAGE plpgsql STABLE AS $$
#variable_conflict use_column
DECLARE
    v_since TIMESTAMPTZ;
BEGIN
    IF p_days IS NULL OR p_days < 1 THEN
        RAISE EXCEPTION 'days must be a positive integer, got %', p_days USING ERRCODE = 'WL003';
    END IF;
    -- Counted in UTC, where every day has 24 hours, whatever the session's
    -- time zone.
    BEGIN
        v_since := (now() AT TIME ZONE 'UTC' - make_interval(days => p_days)) AT TIME ZONE 'UTC';
    EXCEPTION WHEN datetime_field_overflow THEN
        v_since := '-infinity';
    END;

    RETURN QUERY
    WITH activity AS (
        SELECT e.user_id, e.currency,
               count(*) FILTER (WHERE e.kind = 'refund') AS refunds,
               coalesce(-sum(e.amount) FILTER (WHERE e.kind = 'refund'), 0)::BIGINT AS refunded,
               count(*) FILTER (WHERE e.kind = 'credit') AS purchases
        FROM wallet.entries e
        WHERE e.kind IN ('refund', 'credit') AND e.created_at >= v_since
        GROUP BY e.user_id, e.currency
        HAVING count(*) FILTER (WHERE e.kind = 'refund') > 0
    ), answered AS (
        SELECT c.user_id, c.currency, count(*) AS answered
        FROM wallet.outbox q
        JOIN wallet.credits c ON c.flow_no = q.flow_no
        WHERE q.kind = 'appstore_consumption' AND q.status = 'sent' AND q.sent_at >= v_since
        GROUP BY c.user_id, c.currency
    )
    SELECT a.user_id::TEXT, a.currency::TEXT, a.refunds, a.refunded, a.purchases, w.balance,
           coalesce(n.answered, 0)
    FROM activity a
    JOIN wallet.wallets w ON w.user_id = a.user_id AND w.currency = a.currency
    LEFT JOIN answered n ON n.user_id = a.user_id AND n.currency = a.currency
    ORDER BY w.balance < 0 DESC, a.refunded DESC, a.refunds DESC, a.user_id, a.currency;
END;
$$;
