-- The minimal correct one-transaction debit of 1 coin, under a new
-- idempotency key, from a wallet drawn uniformly from pg-u0 .. pg-u<wallets-1>.
-- It writes the service's own tables and keeps every invariant that
-- `wallet check` tests: the entry id is drawn while the wallet row is locked
-- (so balance_after chains along id order), and the key points at its entry,
-- with the amount and the balance its answer gave.
-- Needs the sequence bench.reference_seq and the seeded pg-u* wallets.
-- Run: pgbench -M prepared -n -T 10 -c 8 -j 2 -h 127.0.0.1 -p PORT -U postgres \
--        -D wallets=2000 -f bench/sql/debit_spread.sql wallet
\set n random(0, :wallets - 1)
BEGIN;
SELECT balance FROM wallet.wallets WHERE user_id = 'pg-u' || :n AND currency = 'coin' FOR UPDATE;
UPDATE wallet.wallets SET balance = balance - 1, updated_at = now()
    WHERE user_id = 'pg-u' || :n AND currency = 'coin'
    RETURNING balance \gset
INSERT INTO wallet.idempotency_keys (client, key, request_hash, outcome, entry_id, amount, balance)
    SELECT 'pgbench', 'pgb-' || :client_id || '-' || nextval('bench.reference_seq'), '\x00', 'debited',
           nextval('wallet.entries_id_seq'), 1, :balance
    RETURNING key, entry_id \gset
INSERT INTO wallet.entries (id, user_id, currency, amount, balance_after, kind, reference, client)
    VALUES (:entry_id, 'pg-u' || :n, 'coin', -1, :balance, 'debit', :key, 'pgbench');
COMMIT;
