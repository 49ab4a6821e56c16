-- Lots: where a wallet's coins came from, so that spending, refunds and
-- reports can tell paid coins from free ones, and (as the catalog gains
-- bonuses and the game server rewards) coins that expire from coins that
-- do not.
--
-- Every increase of a balance makes a lot, or refills the lots its refund
-- took from (a refund reversal); every decrease takes from lots, and
-- wallet.entry_lots says which, and how much. Both are written by
-- wallet.post_entries alone (Migrations/functions/11_post_entries.sql).
--
-- A balance below zero is the wallet's debt: what a refund or an allowed
-- revoke took beyond every lot. While a wallet owes, its lots are empty,
-- and an increase repays the debt before it makes a lot with the rest. So
-- for every wallet:
--
--     balance = sum of its lots' remaining - debt,   debt = greatest(0, -balance)
--
-- and each entry written since lots exist moved its lots by
-- greatest(0, balance_after) - greatest(0, balance_after - amount).
-- wallet.check_invariants() proves both.

-- Coins that came in together, and how many of them are left.
--   source: purchase (a store credit: the only paid lots), bonus (coins a
--           product adds to a purchase), grant (an admin's grant), reward
--           (the game server's grant).
--   entry_id: the increase that made it; NULL for an opening lot, made by
--           this migration from a balance that existed before lots did.
--   flow_no: the purchase a purchase lot is (a refund takes from it first).
CREATE TABLE wallet.lots (
    id         BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    user_id    TEXT COLLATE "C" NOT NULL,
    currency   TEXT COLLATE "C" NOT NULL,
    source     TEXT COLLATE "C" NOT NULL CHECK (source IN ('purchase', 'bonus', 'grant', 'reward')),
    paid       BOOLEAN NOT NULL,
    amount     BIGINT NOT NULL CHECK (amount > 0),
    remaining  BIGINT NOT NULL,
    expires_at TIMESTAMPTZ,
    entry_id   BIGINT,
    flow_no    TEXT COLLATE "C",
    created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    -- Whether coins are left: what the open-lots index is about. Taking
    -- coins from a lot that keeps some changes `remaining` but not `open`,
    -- so the update touches no index (a HOT update, with the room
    -- fillfactor leaves on the page).
    open       BOOLEAN GENERATED ALWAYS AS (remaining > 0) STORED,
    CONSTRAINT lots_remaining CHECK (remaining BETWEEN 0 AND amount),
    -- Bought coins are paid, and never expire.
    CONSTRAINT lots_paid CHECK (paid = (source = 'purchase')),
    CONSTRAINT lots_paid_never_expire CHECK (NOT paid OR expires_at IS NULL),
    CONSTRAINT lots_flow_no CHECK (flow_no IS NULL OR source IN ('purchase', 'bonus'))
) WITH (fillfactor = 70);
-- The lots a wallet can still spend from, read under its row lock by every
-- decrease.
CREATE INDEX lots_open ON wallet.lots (user_id, currency) WHERE open;

-- How one entry moved one lot: negative when it took coins, positive when
-- it made the lot or refilled it. Rows are only ever inserted, at most one
-- per entry and lot (wallet.move_lots makes them so), in entry order, so a
-- block-range index finds an entry's rows (a refund reversal reads its
-- refund's) for a fraction of a b-tree's cost on every write.
CREATE TABLE wallet.entry_lots (
    entry_id BIGINT NOT NULL,
    lot_id   BIGINT NOT NULL,
    amount   BIGINT NOT NULL CHECK (amount <> 0)
);
CREATE INDEX entry_lots_entry ON wallet.entry_lots USING brin (entry_id);

CREATE TRIGGER entry_lots_append_only BEFORE UPDATE OR DELETE ON wallet.entry_lots
    FOR EACH ROW EXECUTE FUNCTION wallet.refuse_change();
CREATE TRIGGER entry_lots_no_truncate BEFORE TRUNCATE ON wallet.entry_lots
    FOR EACH STATEMENT EXECUTE FUNCTION wallet.refuse_change();

-- The first entry written with lots: the entry invariant holds from it on.
CREATE TABLE wallet.lot_settings (
    only_row       BOOLEAN PRIMARY KEY DEFAULT TRUE CHECK (only_row),
    first_entry_id BIGINT NOT NULL
);

-- The opening lots. Before this release a coin was a coin; a wallet's
-- balance is split here in two at most: paid, as much of it as the
-- wallet's store credits (less their refunds, plus their reversals) can
-- account for, and free, the rest (admin grants). Spending history does
-- not say which coins were spent, so paid coins are assumed kept first:
-- a player is never shown fewer paid coins than they may hold. A balance
-- at or below zero makes no lot.
LOCK TABLE wallet.wallets IN SHARE ROW EXCLUSIVE MODE;
INSERT INTO wallet.lot_settings (first_entry_id)
SELECT coalesce(pg_sequence_last_value('wallet.entries_id_seq'), 0) + 1;

INSERT INTO wallet.lots (user_id, currency, source, paid, amount, remaining, created_at)
SELECT o.user_id, o.currency, o.source, o.source = 'purchase', o.amount, o.amount, o.opened_at
FROM (
    SELECT w.user_id, w.currency, w.updated_at AS opened_at, s.source,
           CASE s.source WHEN 'purchase' THEN least(w.balance, greatest(0, coalesce(p.bought, 0)))
                         ELSE w.balance - least(w.balance, greatest(0, coalesce(p.bought, 0))) END AS amount
    FROM wallet.wallets w
    LEFT JOIN (SELECT e.user_id, e.currency, sum(e.amount) AS bought
               FROM wallet.entries e WHERE e.kind IN ('credit', 'refund', 'refund_reversal')
               GROUP BY e.user_id, e.currency) p ON p.user_id = w.user_id AND p.currency = w.currency
    CROSS JOIN (VALUES ('purchase'), ('grant')) s (source)
    WHERE w.balance > 0
) o
WHERE o.amount > 0
ORDER BY o.user_id, o.currency, o.source DESC;

-- Entries are written by wallet.post_entries, which makes and takes lots
-- from now on. Its new definition is in its function file, applied after
-- this migration: until then no entry can be written (a caller fails and
-- retries), so none is written without its lots.
DROP FUNCTION IF EXISTS wallet.post_entries(wallet.posting[]);

-- A lot, once made, is kept: entry_lots name it.
CREATE TRIGGER lots_kept BEFORE DELETE ON wallet.lots
    FOR EACH ROW EXECUTE FUNCTION wallet.refuse_change();
CREATE TRIGGER lots_no_truncate BEFORE TRUNCATE ON wallet.lots
    FOR EACH STATEMENT EXECUTE FUNCTION wallet.refuse_change();
