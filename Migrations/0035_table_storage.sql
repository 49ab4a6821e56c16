-- Autovacuum and ANALYZE by rows changed rather than by a share of the
-- table, for the tables every operation appends to (docs/scaling.md,
-- "Autovacuum and ANALYZE at volume"). PostgreSQL's defaults wait for a
-- fifth of a table (a tenth for ANALYZE): at 5 million entries a day and
-- 150 million rows, that is a vacuum every 6 days and statistics up to 3
-- days old. Here, 1% of the table plus a fixed number of rows: a 10,000-row
-- table is still analyzed after about 10,000 changes, a 150-million-row one
-- every 1.5 million.
--
-- SET (...) takes a SHARE UPDATE EXCLUSIVE lock: reads and writes go on.

-- Append-only: vacuums that only set visibility and freeze pages, soon
-- after they are written, so that no later anti-wraparound vacuum has to
-- read the whole ledger at once.
ALTER TABLE wallet.entries SET (
    autovacuum_vacuum_insert_scale_factor = 0.01, autovacuum_vacuum_insert_threshold = 100000,
    autovacuum_analyze_scale_factor = 0.01, autovacuum_analyze_threshold = 10000);
ALTER TABLE wallet.entry_lots SET (
    autovacuum_vacuum_insert_scale_factor = 0.01, autovacuum_vacuum_insert_threshold = 100000,
    autovacuum_analyze_scale_factor = 0.01, autovacuum_analyze_threshold = 10000);

-- Appended to, and purged of what is past its retention: the purge's dead
-- rows are vacuumed by the same rule, so their space is reused within hours.
ALTER TABLE wallet.idempotency_keys SET (
    autovacuum_vacuum_scale_factor = 0.01, autovacuum_vacuum_threshold = 10000,
    autovacuum_vacuum_insert_scale_factor = 0.01, autovacuum_vacuum_insert_threshold = 100000,
    autovacuum_analyze_scale_factor = 0.01, autovacuum_analyze_threshold = 10000);
ALTER TABLE wallet.events SET (
    autovacuum_vacuum_scale_factor = 0.01, autovacuum_vacuum_threshold = 10000,
    autovacuum_vacuum_insert_scale_factor = 0.01, autovacuum_vacuum_insert_threshold = 100000,
    autovacuum_analyze_scale_factor = 0.01, autovacuum_analyze_threshold = 10000);
