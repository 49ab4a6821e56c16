-- The minimal correct one-transaction debit of 1 coin, under a new
-- idempotency key, from the one hot wallet `:hot` (every client on one row).
-- Same statements as debit_spread.sql.
-- Run: pgbench -M prepared -n -T 10 -c 8 -j 2 -h 127.0.0.1 -p PORT -U postgres \
--        -D hot=pg-hot -f bench/sql/debit_hot.sql wallet
BEGIN;
SELECT balance FROM wallet.wallets WHERE user_id = :hot AND currency = 'coin' FOR UPDATE;
UPDATE wallet.wallets SET balance = balance - 1, updated_at = now()
    WHERE user_id = :hot AND currency = 'coin'
    RETURNING balance \gset
INSERT INTO wallet.idempotency_keys (client, key, request_hash, outcome, entry_id, amount, balance)
    SELECT 'pgbench', 'pgb-' || :client_id || '-' || nextval('bench.reference_seq'), '\x00', 'debited',
           nextval('wallet.entries_id_seq'), 1, :balance
    RETURNING key, entry_id \gset
INSERT INTO wallet.entries (id, user_id, currency, amount, balance_after, kind, reference, client)
    VALUES (:entry_id, :hot, 'coin', -1, :balance, 'debit', :key, 'pgbench');
COMMIT;
