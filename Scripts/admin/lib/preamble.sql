-- What every admin script starts with (`\ir lib/preamble.sql`): stop at the
-- first error, print only what the script prints, and commit as the service
-- does, with synchronous_commit on whatever the server's or the database's
-- default, so that a line saying "refunded" is durable (and, where
-- synchronous standbys are configured, on them too). Run the scripts on a
-- direct connection (WALLET_DATABASE_SESSION_URL, past any pooler in
-- transaction mode), where a session setting holds for the whole script.
\set ON_ERROR_STOP on
\set QUIET on
SET synchronous_commit = on;
