-- wallet.balances, the batched balance read behind GET /v1/wallets/{user_id}
-- and the console's player page, re-applied by the migrator whenever this
-- file changes. It takes no lock.
--
-- A function rather than a statement the service prepares, for its
-- planner settings, which a function keeps wherever it is called from
-- (through a pooler in transaction mode too, where session settings do not
-- follow the connection):
-- - jit is off. On tables that were never analyzed the planner guesses
--   that each user id matches 0.5% of the wallets, so a read of 64 users
--   was costed at 2 million and JIT-compiled on every call (0.25 s to 3 s
--   of compiling for a 2 ms read): balance reads fell from 28.6k/s to
--   3.3k/s on a freshly loaded database of 200,000 wallets until ANALYZE.
-- - plan_cache_mode is force_generic_plan: one plan per connection for every
--   batch size, not a plan per call (planning 256 users took 3 ms).
-- - enable_seqscan is off, so that plan reads wallets, holds and lots by
--   their indexes whatever the statistics say (PlanTests checks it on a
--   database never analyzed, then analyzed).

-- The balances of the users in `p_user_ids`, one row per wallet, in no
-- order. Holds past their time and coins past their lot's expiry count as
-- gone, whether or not a sweeper or a write came by; a wallet with neither
-- is read from its row alone. Its open lots give paid and free coins and
-- the next expiry (a wallet that never expires coins reads no lot twice).
CREATE OR REPLACE FUNCTION wallet.balances(p_user_ids TEXT[])
RETURNS TABLE (user_id TEXT, currency TEXT, balance BIGINT, held BIGINT, expired BIGINT, paid BIGINT, free BIGINT,
               next_amount BIGINT, next_at TIMESTAMPTZ)
LANGUAGE plpgsql STABLE
SET jit = off
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
AS $$
BEGIN
    RETURN QUERY
    SELECT w.user_id::TEXT, w.currency::TEXT, w.balance, h.held,
           CASE WHEN w.next_expiry <= now() THEN wallet.expirable(w.user_id, w.currency, w.balance, h.held)
                ELSE 0 END::BIGINT,
           coalesce(l.paid, 0)::BIGINT, coalesce(l.free, 0)::BIGINT,
           CASE WHEN l.next_at IS NOT NULL THEN (
               SELECT sum(x.remaining) FROM wallet.lots x
               WHERE x.user_id = w.user_id AND x.currency = w.currency AND x.open
                 AND x.expires_at = l.next_at) END::BIGINT,
           l.next_at
    FROM wallet.wallets w
    CROSS JOIN LATERAL (
        SELECT CASE WHEN w.held = 0 THEN 0 ELSE (
            SELECT coalesce(sum(x.amount), 0) FROM wallet.holds x
            WHERE x.user_id = w.user_id AND x.currency = w.currency AND x.status = 'held'
              AND x.expires_at > now()) END::BIGINT AS held) h
    CROSS JOIN LATERAL (
        SELECT sum(x.remaining) FILTER (WHERE x.paid)::BIGINT AS paid,
               sum(x.remaining) FILTER (WHERE NOT x.paid)::BIGINT AS free,
               CASE WHEN w.next_expiry IS NOT NULL THEN min(x.expires_at) FILTER (WHERE x.expires_at > now())
               END AS next_at
        FROM wallet.lots x WHERE x.user_id = w.user_id AND x.currency = w.currency AND x.open) l
    WHERE w.user_id = ANY (p_user_ids);
END;
$$;
