-- The floor of a hold and its capture: the minimal correct hold of 1 coin,
-- then its capture, in two transactions as POST /v1/holds and
-- POST /v1/holds/{id}/capture are (one pgbench transaction for both), from
-- a wallet drawn uniformly from pg-u0 .. pg-u<wallets-1>, on the floor's
-- tables (floor-schema.sql says what each keeps correct). It is the
-- minimum: the hold raises `held` (the CHECK refuses holding coins the
-- wallet lacks; the UPDATE locks the row) and writes the hold under the
-- client's key (a retried hold fails on its primary key). The capture moves
-- the coins out of `balance` and `held` in one UPDATE, records the entry,
-- and claims the hold for it only while `entry_id` is null: a second
-- capture claims no row and must roll back (here the \gset fails on no row,
-- which ends the client and so rolls its transaction back).
-- Lock order, in both transactions: the wallet row, then the hold row.
-- Run: pgbench -M prepared -n -T 10 -c 8 -j 2 -h 127.0.0.1 -p PORT -U postgres \
--        -D wallets=2000 -f bench/sql/floor-hold-capture.sql wallet_floor
\set n random(0, :wallets - 1)
BEGIN;
UPDATE floor.wallets SET held = held + 1 WHERE user_id = 'pg-u' || :n RETURNING balance \gset
INSERT INTO floor.holds (key, user_id, amount) VALUES ('fh-' || nextval('floor.reference_seq'), 'pg-u' || :n, 1)
    RETURNING key AS hold_key \gset
COMMIT;
BEGIN;
UPDATE floor.wallets SET balance = balance - 1, held = held - 1 WHERE user_id = 'pg-u' || :n
    RETURNING balance \gset
INSERT INTO floor.entries (user_id, amount, balance_after) VALUES ('pg-u' || :n, -1, :balance)
    RETURNING id AS entry_id \gset
UPDATE floor.holds SET entry_id = :entry_id
    WHERE key = :hold_key AND user_id = 'pg-u' || :n AND amount = 1 AND entry_id IS NULL
    RETURNING key AS captured_key \gset
COMMIT;
