-- Checkpoints of the ledger check (`wallet check`, the service's verifier):
-- each clean run stores through which event its check reached, so the next
-- incremental run checks only what the events after it touched
-- (wallet.check_changes, Migrations/functions/21_incremental_check.sql).
-- A run that finds a violation stores nothing: the next run checks the
-- same changes again, and more.
CREATE TABLE wallet.check_checkpoints (
    id                   BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    checked_at           TIMESTAMPTZ NOT NULL DEFAULT now(),
    -- Every event up to this id had committed before the check's snapshot
    -- was taken (wallet.events_visible_through), so the check saw it.
    through_event_id     BIGINT NOT NULL CHECK (through_event_id >= 0),
    -- The greatest entry id told by those events: the last entry verified.
    through_entry_id     BIGINT NOT NULL CHECK (through_entry_id >= 0),
    mode                 TEXT NOT NULL CHECK (mode IN ('full', 'incremental')),
    duration_milliseconds BIGINT NOT NULL CHECK (duration_milliseconds >= 0)
);
