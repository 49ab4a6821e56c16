-- The preamble of the scripts that print one line per result: bare values,
-- no headers, no alignment.
\ir preamble.sql
\pset tuples_only on
\pset format unaligned
