-- The minimal correct one-transaction credit of one guodong600 bundle under
-- a new flowNO, to a wallet drawn uniformly from pg-u0 .. pg-u<wallets-1>.
-- The amount comes from the catalog; the wallet is made if missing, then
-- locked, and only then is the entry id drawn (so balance_after chains along
-- id order). The credit row points at its entry, as `wallet check` requires.
-- Needs the sequence bench.reference_seq.
-- Run: pgbench -M prepared -n -T 10 -c 8 -j 2 -h 127.0.0.1 -p PORT -U postgres \
--        -D wallets=2000 -f bench/sql/credit_spread.sql wallet
\set n random(0, :wallets - 1)
BEGIN;
INSERT INTO wallet.wallets (user_id, currency) VALUES ('pg-u' || :n, 'coin') ON CONFLICT DO NOTHING;
SELECT balance FROM wallet.wallets WHERE user_id = 'pg-u' || :n AND currency = 'coin' FOR UPDATE;
INSERT INTO wallet.credits (flow_no, user_id, product_id, quantity, currency, amount, source, client, entry_id)
    SELECT 'pgb-' || :client_id || '-' || nextval('bench.reference_seq'), 'pg-u' || :n, p.product_id, 1,
           p.currency, p.amount, 'caller', 'pgbench', nextval('wallet.entries_id_seq')
    FROM wallet.products p WHERE p.product_id = 'guodong600' AND p.active
    RETURNING flow_no, amount, entry_id \gset
UPDATE wallet.wallets SET balance = balance + :amount, updated_at = now()
    WHERE user_id = 'pg-u' || :n AND currency = 'coin'
    RETURNING balance \gset
INSERT INTO wallet.entries (id, user_id, currency, amount, balance_after, kind, reference, client)
    VALUES (:entry_id, 'pg-u' || :n, 'coin', :amount, :balance, 'credit', :flow_no, 'pgbench');
COMMIT;
