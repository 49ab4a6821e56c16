-- The balance read behind GET /v1/wallets/{user_id}, for a wallet drawn
-- uniformly from u0 .. u<wallets-1> (the wallets the service reads too).
-- Run: pgbench -M prepared -n -T 10 -c 8 -j 2 -h 127.0.0.1 -p PORT -U postgres \
--        -D wallets=2000 -f bench/sql/read_spread.sql wallet
\set n random(0, :wallets - 1)
SELECT currency, balance FROM wallet.wallets WHERE user_id = 'u' || :n ORDER BY currency;
