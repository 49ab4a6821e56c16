-- The floor of a debit on one hot wallet: floor-debit-spread.sql's
-- statements, always on the wallet `:hot` (every client on one row).
-- Run: pgbench -M prepared -n -T 10 -c 8 -j 2 -h 127.0.0.1 -p PORT -U postgres \
--        -D hot=pg-hot -f bench/sql/floor-debit-hot.sql wallet_floor
BEGIN;
UPDATE floor.wallets SET balance = balance - 1 WHERE user_id = :hot RETURNING balance \gset
INSERT INTO floor.entries (user_id, amount, balance_after) VALUES (:hot, -1, :balance)
    RETURNING id AS entry_id \gset
INSERT INTO floor.debit_keys (key, entry_id) VALUES ('fd-' || nextval('floor.reference_seq'), :entry_id);
COMMIT;
