-- The minimal correct hold of 1 coin and its capture, in two transactions,
-- from a wallet drawn uniformly from pg-u0 .. pg-u<wallets-1>: what
-- POST /v1/holds and POST /v1/holds/{id}/capture do, one pgbench
-- transaction for both. It keeps every invariant `wallet check` tests:
-- `held` follows the holds, the capture's entry id is drawn while the wallet
-- row is locked, and each key points at its hold (and the capture's at its
-- entry, with its amount and balance).
-- Needs the sequence bench.reference_seq and the seeded pg-u* wallets.
-- Run: pgbench -M prepared -n -T 10 -c 8 -j 2 -h 127.0.0.1 -p PORT -U postgres \
--        -D wallets=2000 -f bench/sql/hold_capture.sql wallet
\set n random(0, :wallets - 1)
BEGIN;
SELECT balance - held AS available FROM wallet.wallets WHERE user_id = 'pg-u' || :n AND currency = 'coin' FOR UPDATE;
INSERT INTO wallet.holds (client, user_id, currency, amount, expires_at)
    VALUES ('pgbench', 'pg-u' || :n, 'coin', 1, now() + interval '600 seconds')
    RETURNING id AS hold_id \gset
UPDATE wallet.wallets SET held = held + 1, updated_at = now()
    WHERE user_id = 'pg-u' || :n AND currency = 'coin'
    RETURNING balance \gset
INSERT INTO wallet.idempotency_keys (client, key, request_hash, outcome, response, hold_id, amount, balance, held)
    VALUES ('pgbench', 'pgh-' || :client_id || '-' || nextval('bench.reference_seq'), '\x00', 'held', '{}',
            :hold_id, 1, :balance, 1);
COMMIT;
BEGIN;
SELECT balance FROM wallet.wallets WHERE user_id = 'pg-u' || :n AND currency = 'coin' FOR UPDATE;
SELECT status FROM wallet.holds WHERE id = :hold_id FOR UPDATE;
UPDATE wallet.wallets SET balance = balance - 1, held = held - 1, updated_at = now()
    WHERE user_id = 'pg-u' || :n AND currency = 'coin'
    RETURNING balance \gset
INSERT INTO wallet.entries (id, user_id, currency, amount, balance_after, kind, reference, client)
    VALUES (nextval('wallet.entries_id_seq'), 'pg-u' || :n, 'coin', -1, :balance, 'debit', 'hold:' || :hold_id, 'pgbench')
    RETURNING id AS entry_id \gset
UPDATE wallet.holds SET status = 'captured', captured_amount = 1, captured_at = now(), entry_id = :entry_id
    WHERE id = :hold_id;
INSERT INTO wallet.idempotency_keys (client, key, request_hash, outcome, response, hold_id, entry_id, amount, balance, held)
    VALUES ('pgbench', 'pgc-' || :client_id || '-' || nextval('bench.reference_seq'), '\x00', 'captured', '{}',
            :hold_id, :entry_id, 1, :balance, 0);
COMMIT;
