-- Checks the books through wallet.check_invariants(), the check the
-- service's `wallet check` runs: every balance equals the sum of its ledger
-- entries, balance_after values chain, each credit has its one entry, refunds
-- and reversals alternate, a balance is negative only after a refund or an
-- allowed revoke, and each stored debit outcome has its entry. Prints each
-- violation on a line of its own and then fails (psql exits 3), or prints
-- one line saying that every invariant holds. It only reads.
--
-- Run:
--   psql -X "$WALLET_DATABASE_URL" -v ON_ERROR_STOP=1 -f Scripts/admin/check.sql
--
-- Prints, e.g.
--   ok: every invariant holds
-- or
--   violation balance_matches_ledger u1/coin: balance 999, ledger sum 600
--   FAILED: 1 invariant violation(s)
-- followed by an error on stderr.

\ir lib/one_line.sql

-- One pass over the books: the rows are printed, and psql's ROW_COUNT says
-- how many there were.
SELECT format('violation %s %s: %s', v.invariant, v.subject, v.detail)
FROM wallet.check_invariants() v;
\set violations :ROW_COUNT

SELECT :violations > 0 AS violated \gset
\if :violated
    \echo 'FAILED:' :violations 'invariant violation(s)'
    -- psql's \quit would exit 0; an error under ON_ERROR_STOP exits 3.
    SELECT set_config('wallet.check_violations', :'violations', FALSE) \g /dev/null
    DO $$
    BEGIN
        RAISE EXCEPTION 'wallet invariants violated: % violation(s)', current_setting('wallet.check_violations');
    END
    $$;
\else
    \echo 'ok: every invariant holds'
\endif
