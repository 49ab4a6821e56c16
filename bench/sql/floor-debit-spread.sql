-- The floor of a debit: the minimal correct one-transaction debit of 1 coin,
-- under a new idempotency key, from a wallet drawn uniformly from
-- pg-u0 .. pg-u<wallets-1>, on the floor's tables (floor-schema.sql says
-- what each keeps correct). It is the minimum: the UPDATE both decides (the
-- CHECK refuses an overdraft) and locks the wallet, the entry records the
-- movement, and the key row, in the same transaction, makes a retry fail on
-- its primary key instead of charging twice. Nothing is read first, as the
-- keys are new (a client that sees the key's unique violation reads the
-- stored outcome: SELECT ... FROM floor.debit_keys JOIN floor.entries).
-- Lock order: the wallet row, then the new rows.
-- Run: pgbench -M prepared -n -T 10 -c 8 -j 2 -h 127.0.0.1 -p PORT -U postgres \
--        -D wallets=2000 -f bench/sql/floor-debit-spread.sql wallet_floor
\set n random(0, :wallets - 1)
BEGIN;
UPDATE floor.wallets SET balance = balance - 1 WHERE user_id = 'pg-u' || :n RETURNING balance \gset
INSERT INTO floor.entries (user_id, amount, balance_after) VALUES ('pg-u' || :n, -1, :balance)
    RETURNING id AS entry_id \gset
INSERT INTO floor.debit_keys (key, entry_id) VALUES ('fd-' || nextval('floor.reference_seq'), :entry_id);
COMMIT;
