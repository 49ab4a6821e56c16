-- The floor of a credit: the minimal correct one-transaction credit of
-- :amount coins (one guodong600 bundle, 600) under a new flowNO, to a wallet
-- drawn uniformly from pg-u0 .. pg-u<wallets-1>, on the floor's tables
-- (floor-schema.sql). It is the minimum: the upsert makes a missing wallet
-- and locks the row either way, the entry records the movement, and the
-- credit row, in the same transaction, makes a repeated flowNO fail on its
-- primary key instead of crediting twice. The amount is the client's, not
-- looked up in a catalog. Lock order: the wallet row, then the new rows.
-- Run: pgbench -M prepared -n -T 10 -c 8 -j 2 -h 127.0.0.1 -p PORT -U postgres \
--        -D wallets=2000 -D amount=600 -f bench/sql/floor-credit-spread.sql wallet_floor
\set n random(0, :wallets - 1)
BEGIN;
INSERT INTO floor.wallets AS w (user_id, balance) VALUES ('pg-u' || :n, :amount)
    ON CONFLICT (user_id) DO UPDATE SET balance = w.balance + excluded.balance
    RETURNING balance \gset
INSERT INTO floor.entries (user_id, amount, balance_after) VALUES ('pg-u' || :n, :amount, :balance)
    RETURNING id AS entry_id \gset
INSERT INTO floor.credits (flow_no, entry_id) VALUES ('fc-' || nextval('floor.reference_seq'), :entry_id);
COMMIT;
