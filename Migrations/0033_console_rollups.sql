-- The console's overview from rollups: per-day totals kept by a job that
-- follows the event log (Migrations/functions/20_console_rollups.sql), and
-- the ten largest and most negative balances from a short list of
-- candidates, so /admin reads a few thousand rows whatever the ledger's
-- size instead of aggregating wallet.entries and scanning wallet.wallets.
--
-- The write path does not change: the job, not wallet.post_entries, adds
-- to the rollups (updating a (day, currency, kind) row in every posting
-- would queue every concurrent debit on it).

-- How far the job has rolled up: every event with id <= rolled_through
-- (and every entry with no event: before 0019, or its event purged) is in
-- the rollups; the console adds the events above it itself. Moved only
-- together with the rollups it stands for, in one transaction; its row is
-- also the lock that keeps one job at a time.
CREATE TABLE wallet.console_rollup_state (
    only_row       BOOLEAN PRIMARY KEY DEFAULT TRUE CHECK (only_row),
    rolled_through BIGINT NOT NULL CHECK (rolled_through >= 0),
    rolled_at      TIMESTAMPTZ NOT NULL DEFAULT now()
);

-- Ledger entries per UTC day (of created_at), currency and kind: their
-- amounts' sum (signed, as entries are; NUMERIC so no day's sum can
-- overflow and stop the job) and how many.
CREATE TABLE wallet.console_daily_entries (
    day      DATE NOT NULL,
    currency TEXT COLLATE "C" NOT NULL,
    kind     TEXT NOT NULL,
    amount   NUMERIC NOT NULL,
    entries  BIGINT NOT NULL CHECK (entries > 0),
    PRIMARY KEY (day, currency, kind)
);

-- Credits (purchases: one row of wallet.credits each, whatever its lines)
-- per UTC day of the credit's created_at, and currency.
CREATE TABLE wallet.console_daily_purchases (
    day       DATE NOT NULL,
    currency  TEXT COLLATE "C" NOT NULL,
    purchases BIGINT NOT NULL CHECK (purchases > 0),
    PRIMARY KEY (day, currency)
);

-- The two balance lists. Each ranks wallets by (sign * balance, user_id,
-- currency), ascending, among those with sign * balance < 0: `largest`
-- (sign -1) is balance descending among balances above zero, `negative`
-- (sign 1) balance ascending among those below. The threshold is a rank
-- every wallet that is not a candidate came after when the list was last
-- worked out, and still does unless an event has touched it since; NULL
-- when every wallet in the list's range is a candidate. The rank below
-- every other one, set here, makes the job work the lists out afresh on
-- its first run (the console scans wallet.wallets until then).
CREATE TABLE wallet.console_balance_lists (
    list               TEXT PRIMARY KEY CHECK (list IN ('largest', 'negative')),
    sign               SMALLINT NOT NULL CHECK (sign IN (-1, 1)),
    threshold_key      BIGINT,
    threshold_user_id  TEXT COLLATE "C",
    threshold_currency TEXT COLLATE "C",
    computed_at        TIMESTAMPTZ NOT NULL DEFAULT now(),
    CONSTRAINT console_balance_lists_sign CHECK (sign = CASE list WHEN 'largest' THEN -1 ELSE 1 END),
    CONSTRAINT console_balance_lists_threshold CHECK (
        (threshold_key IS NULL) = (threshold_user_id IS NULL) AND (threshold_key IS NULL) = (threshold_currency IS NULL))
);
INSERT INTO wallet.console_balance_lists (list, sign, threshold_key, threshold_user_id, threshold_currency)
VALUES ('largest', -1, -9223372036854775808, '', ''), ('negative', 1, -9223372036854775808, '', '');

-- A list's candidates: at most 100 wallets, the list's best as last worked
-- out. Only the key is kept; balances are read from wallet.wallets.
CREATE TABLE wallet.console_balance_candidates (
    list     TEXT NOT NULL REFERENCES wallet.console_balance_lists (list),
    user_id  TEXT COLLATE "C" NOT NULL,
    currency TEXT COLLATE "C" NOT NULL,
    PRIMARY KEY (list, user_id, currency)
);

-- Consumption requests in a window (the overview counts them): rows of
-- that kind only, which come one per refund request, so the index costs
-- the Google consumes that fill the outbox nothing.
CREATE INDEX outbox_consumption_created ON wallet.outbox (created_at) WHERE kind = 'appstore_consumption';

-- The backfill: every entry whose event is at or below the id up to which
-- every event that will ever exist has committed (w), and every entry with
-- no event (made before 0019, or its event purged), with their credits.
-- Entries whose event is above w are left to the job: they are the events
-- it reads first. An entry that commits after the statement below read the
-- ledger has an event above w (all those at or below it had committed when
-- w was read), so nothing is counted twice or missed. A database migrating
-- from before 0019 in this run has no events and no visibility function
-- yet (the function files are applied after the migrations): w is 0 and
-- every entry is rolled up here.
DO $$
DECLARE
    v_through BIGINT := 0;
BEGIN
    IF to_regprocedure('wallet.events_visible_through()') IS NOT NULL THEN
        EXECUTE 'SELECT wallet.events_visible_through()' INTO v_through;
    END IF;
    INSERT INTO wallet.console_daily_entries (day, currency, kind, amount, entries)
    SELECT (e.created_at AT TIME ZONE 'UTC')::DATE, e.currency, e.kind, sum(e.amount), count(*)
    FROM wallet.entries e
    WHERE NOT EXISTS (SELECT FROM wallet.events v
                      WHERE v.id > v_through AND v.entry_id = e.id AND v.type <> 'balance.negative')
    GROUP BY 1, 2, 3;
    -- (A credit commits with its entry, so this later statement counts the
    -- credits of exactly the entries above.)
    INSERT INTO wallet.console_daily_purchases (day, currency, purchases)
    SELECT (c.created_at AT TIME ZONE 'UTC')::DATE, c.currency, count(*)
    FROM wallet.credits c
    WHERE NOT EXISTS (SELECT FROM wallet.events v
                      WHERE v.id > v_through AND v.entry_id = c.entry_id AND v.type <> 'balance.negative')
    GROUP BY 1, 2;
    INSERT INTO wallet.console_rollup_state (rolled_through) VALUES (v_through);
END;
$$;
