-- wallet.report (Scripts/admin/report.sql), re-applied by the migrator
-- whenever this file changes (first defined in
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
