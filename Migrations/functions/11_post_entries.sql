-- wallet.post_entries, the one place where money moves, re-applied by the
-- migrator whenever this file changes (its type, wallet.posting, is in
-- 0017_one_posting.sql).
--
-- Lock order, everywhere (01_lock_flow_nos.sql): flowNO locks, then
-- purchase-token locks, then wallet rows in (user_id, currency) order, then
-- credit or hold rows. Posting comes last: its caller has locked every
-- wallet it posts to, in that order, so the update here waits for nothing
-- and takes no lock out of turn.

-- A posting, named field by field: one movement of coins in one wallet,
-- with its signed amount. Its event is the one its kind makes
-- (wallet.event_type) unless `p_event` names another; `p_held` moves the
-- wallet's held coins; `p_data` is what the event adds to the entry's
-- metadata; `p_lot_source` and `p_lot_expires_at` say what lot an increase
-- makes (wallet.move_lots: by default its kind's, never expiring).
CREATE OR REPLACE FUNCTION wallet.new_posting(
    p_kind TEXT, p_user_id TEXT, p_currency TEXT, p_amount BIGINT, p_reference TEXT, p_client TEXT,
    p_metadata JSONB DEFAULT NULL, p_held BIGINT DEFAULT NULL, p_event TEXT DEFAULT NULL,
    p_hold_id BIGINT DEFAULT NULL, p_flow_no TEXT DEFAULT NULL, p_data JSONB DEFAULT NULL,
    p_lot_source TEXT DEFAULT NULL, p_lot_expires_at TIMESTAMPTZ DEFAULT NULL)
RETURNS wallet.posting
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    v_posting wallet.posting;
BEGIN
    v_posting.kind := p_kind;
    v_posting.user_id := p_user_id;
    v_posting.currency := p_currency;
    v_posting.amount := p_amount;
    v_posting.reference := p_reference;
    v_posting.client := p_client;
    v_posting.metadata := p_metadata;
    v_posting.held := p_held;
    v_posting.event := p_event;
    v_posting.hold_id := p_hold_id;
    v_posting.flow_no := p_flow_no;
    v_posting.data := p_data;
    v_posting.lot_source := p_lot_source;
    v_posting.lot_expires_at := p_lot_expires_at;
    RETURN v_posting;
END;
$$;

-- A posting that moves only held coins (a hold placed, released or
-- expired): no ledger entry, and its event.
CREATE OR REPLACE FUNCTION wallet.hold_posting(p_event TEXT, p_hold wallet.holds, p_held BIGINT)
RETURNS wallet.posting
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    RETURN wallet.new_posting(
        p_kind => NULL, p_user_id => p_hold.user_id, p_currency => p_hold.currency, p_amount => 0,
        p_reference => 'hold:' || p_hold.id, p_client => p_hold.client, p_held => p_held, p_event => p_event,
        p_hold_id => p_hold.id,
        p_data => jsonb_strip_nulls(jsonb_build_object(
            'hold_amount', p_hold.amount, 'reason', p_hold.reason, 'release_reason', p_hold.release_reason,
            'expires_at', wallet.rfc3339(p_hold.expires_at))));
END;
$$;

-- The event a posting is: the one it names (p_event), else its kind's.
CREATE OR REPLACE FUNCTION wallet.event_type(p_event TEXT, p_kind TEXT)
RETURNS TEXT
LANGUAGE sql IMMUTABLE
RETURN coalesce(p_event, CASE p_kind WHEN 'credit' THEN 'credit.created'
                                     WHEN 'debit' THEN 'debit.created'
                                     WHEN 'refund' THEN 'credit.refunded'
                                     WHEN 'refund_reversal' THEN 'credit.refund_reversed'
                                     WHEN 'grant' THEN 'grant.created'
                                     WHEN 'revoke' THEN 'revoke.created'
                                     WHEN 'expire' THEN 'coins.expired'
                                     WHEN 'bonus' THEN 'bonus.created' END);

-- Marks this transaction as one that writes events, before it draws their
-- ids, for wallet.events_visible_through: a shared advisory lock (namespace
-- 'WLEV'), held until the transaction ends, whose key is the low 32 bits of
-- an id no greater than any the transaction will draw.
CREATE OR REPLACE FUNCTION wallet.mark_event_writer() RETURNS VOID
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_advisory_xact_lock_shared(
        x'574C4556'::INTEGER,
        ((coalesce(pg_sequence_last_value('wallet.events_id_seq'), 0) + 1) & x'FFFFFFFF'::BIGINT)::BIT(32)::INTEGER);
END;
$$;

-- The feed's visibility rule: the greatest id up to which every event that
-- will ever exist is committed now, so a reader that reads events up to it
-- (in a later statement, with a later snapshot) never sees one appear
-- behind its cursor afterwards.
--
-- Event ids are drawn from a sequence inside the writing transactions, and
-- transactions commit in any order: an event may commit after one with a
-- greater id. Each writing transaction first takes wallet.mark_event_writer's
-- lock, keyed by an id no greater than any it draws, and holds it until it
-- has committed or rolled back (PostgreSQL releases a transaction's locks
-- after its commit is visible). So the bound is one below the smallest key
-- held (any id drawn by a transaction still running is at least its key),
-- and at most the sequence's last value read before the locks (a
-- transaction that takes its lock later draws ids above that).
--
-- A key holds an id's low 32 bits: the id is the greatest one with those
-- bits no greater than the sequence's next value read after the locks
-- (every key held was made from a value read before that).
CREATE OR REPLACE FUNCTION wallet.events_visible_through() RETURNS BIGINT
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    v_last BIGINT := coalesce(pg_sequence_last_value('wallet.events_id_seq'), 0);
    v_keys BIGINT[];
    v_next BIGINT;
    v_held BIGINT;
BEGIN
    SELECT array_agg(l.objid::TEXT::BIGINT) INTO v_keys
    FROM pg_locks l
    WHERE l.locktype = 'advisory' AND l.classid = x'574C4556'::INTEGER::TEXT::OID AND l.objsubid = 2
      AND l.database = (SELECT d.oid FROM pg_database d WHERE d.datname = current_database());
    IF v_keys IS NULL THEN
        RETURN v_last;
    END IF;
    v_next := coalesce(pg_sequence_last_value('wallet.events_id_seq'), 0) + 1;
    SELECT min(v_next - ((v_next - k) & x'FFFFFFFF'::BIGINT)) INTO v_held FROM unnest(v_keys) k;
    RETURN least(v_last, v_held - 1);
END;
$$;

-- Applies postings: appends one ledger entry per posting that has a kind,
-- moves each wallet's balance and held coins by the postings' sums, and
-- appends one event per posting, and a balance.negative beside each that
-- takes coins and leaves the balance below zero. Returns one entry per
-- posting, in posting order: the entry as written, or NULL for a posting
-- that moves only held coins.
--
-- It is the only code that inserts into wallet.entries or wallet.events and
-- the only code that changes wallet.wallets.balance or held (and, through
-- wallet.move_lots, the only code that makes, takes or refills lots), so
-- the ledger's and the events' shape is made here once: an entry's balance_after (and an
-- event's held) is its wallet's before the call plus what was posted to the
-- wallet up to and including it, in posting order, and entry and event ids
-- are drawn in posting order (each nextval of a session is greater than its
-- last; event ids two per posting, the second for a balance.negative, and
-- unused ones are skipped), so a wallet's ids follow the order its changes
-- were applied. They are drawn after the caller locked the wallets: a change
-- of another transaction to these wallets has smaller ids (it committed
-- before the lock was granted) or comes after this one commits.
--
-- What may be posted is the caller's decision and the tables' constraints'
-- (each kind has its sign; a debit never ends below zero). A posting to a
-- wallet that does not exist raises WL003: the caller makes wallets first.
-- Set-based, a few statements however many postings: the writer's mark,
-- the ids, then one statement that moves the wallets, works out each
-- posting's balance and held coins (window sums in posting order), and
-- writes the entries and events, then the lots' moves: the short way
-- (wallet.take_from_first_lots) for a call of debits that are no captures,
-- one per wallet, which is what the game server's batches mostly are. The planner settings are
-- wallet.debit_many's, for the same reasons, and pinned here because this
-- function's plans are cached once per connection, whoever calls it first.
CREATE OR REPLACE FUNCTION wallet.post_entries(p_postings wallet.posting[])
RETURNS wallet.entries[]
LANGUAGE plpgsql
SET enable_seqscan = off
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    v_entry_ids BIGINT[];
    v_event_ids BIGINT[];
    v_entries   wallet.entries[];
    v_posted    INTEGER;
    v_plain     BOOLEAN;
BEGIN
    IF coalesce(cardinality(p_postings), 0) = 0 THEN
        RETURN '{}';
    END IF;
    PERFORM wallet.mark_event_writer();
    v_entry_ids := ARRAY(SELECT nextval('wallet.entries_id_seq') FROM unnest(p_postings) q WHERE q.kind IS NOT NULL);
    v_event_ids := ARRAY(SELECT nextval('wallet.events_id_seq') FROM generate_series(1, 2 * cardinality(p_postings)));
    WITH moved AS (
        UPDATE wallet.wallets SET balance = balance + m.amount, held = wallets.held + m.held, updated_at = now()
        FROM (SELECT q.user_id, q.currency, sum(q.amount)::BIGINT AS amount, coalesce(sum(q.held), 0)::BIGINT AS held,
                     count(*) AS postings
              FROM unnest(p_postings) q
              GROUP BY q.user_id, q.currency) m
        WHERE wallets.user_id = m.user_id AND wallets.currency = m.currency
        RETURNING wallets.user_id, wallets.currency, wallets.balance - m.amount AS opening,
                  wallets.held - m.held AS held_before, m.postings
    ), applied AS (
        SELECT q.*, q.ordinality::INTEGER AS ord, m.postings,
               m.opening + sum(q.amount) OVER w AS balance_after,
               m.held_before + sum(coalesce(q.held, 0)) OVER w AS held_after,
               CASE WHEN q.kind IS NOT NULL THEN count(q.kind) OVER (ORDER BY q.ordinality) END AS entry_no
        FROM unnest(p_postings) WITH ORDINALITY q
        JOIN moved m ON m.user_id = q.user_id AND m.currency = q.currency
        WINDOW w AS (PARTITION BY q.user_id, q.currency ORDER BY q.ordinality)
    ), written AS (
        INSERT INTO wallet.entries (id, user_id, currency, amount, balance_after, kind, reference, client, metadata)
        SELECT v_entry_ids[a.entry_no], a.user_id, a.currency, a.amount, a.balance_after, a.kind, a.reference,
               a.client, a.metadata
        FROM applied a WHERE a.entry_no IS NOT NULL
        RETURNING *
    ), told AS (
        INSERT INTO wallet.events (id, type, user_id, currency, amount, balance_after, held, available, entry_id,
                                   hold_id, flow_no, created_at, data)
        SELECT v_event_ids[2 * a.ord - 1 + n.negative::INTEGER],
               CASE WHEN n.negative THEN 'balance.negative' ELSE wallet.event_type(a.event, a.kind) END,
               a.user_id, a.currency, CASE WHEN n.negative THEN 0 ELSE a.amount END, a.balance_after, a.held_after,
               a.balance_after - a.held_after, v_entry_ids[a.entry_no], a.hold_id,
               coalesce(a.flow_no, CASE WHEN a.kind IN ('credit', 'refund', 'refund_reversal', 'bonus') THEN a.reference END),
               now(),
               CASE WHEN n.negative
                    THEN jsonb_build_object('cause', wallet.event_type(a.event, a.kind))
                    ELSE coalesce(a.metadata, '{}') || coalesce(a.data, '{}') END
               || jsonb_build_object('client', a.client, 'reference', a.reference)
        FROM applied a
        CROSS JOIN (VALUES (FALSE), (TRUE)) n (negative)
        WHERE NOT n.negative OR (a.amount < 0 AND a.balance_after < 0)
    )
    SELECT array_agg(w::wallet.entries ORDER BY a.ord), count(*),
           bool_and(coalesce(a.kind = 'debit' AND a.hold_id IS NULL AND a.postings = 1, FALSE))
    INTO v_entries, v_posted, v_plain
    FROM applied a LEFT JOIN written w ON w.id = v_entry_ids[a.entry_no];
    IF v_posted <> cardinality(p_postings) THEN
        RAISE EXCEPTION 'post_entries: a posting names no wallet' USING ERRCODE = 'WL003';
    END IF;
    IF v_plain THEN
        PERFORM wallet.take_from_first_lots(p_postings, v_entries);
    ELSE
        PERFORM wallet.move_lots(p_postings, v_entries);
    END IF;
    RETURN v_entries;
END;
$$;

-- How one entry moves its wallet's lots (Migrations/0026_lots.sql): by
-- its delta, the part of its amount above the debt line, positive when it
-- makes or refills lots and negative when it takes from them.
CREATE OR REPLACE FUNCTION wallet.lot_delta(p_balance_after BIGINT, p_amount BIGINT)
RETURNS BIGINT
LANGUAGE sql IMMUTABLE
RETURN greatest(0, p_balance_after) - greatest(0, p_balance_after - p_amount);

-- Which lots a decrease may take from: `fresh` for a debit that is no
-- capture (never coins past their expiry; a capture's coins were kept for
-- its hold), `expired` for an expire entry (only those), `any` otherwise.
CREATE OR REPLACE FUNCTION wallet.lot_rule(p_kind TEXT, p_hold_id BIGINT)
RETURNS TEXT
LANGUAGE sql IMMUTABLE
RETURN CASE WHEN p_kind = 'debit' AND p_hold_id IS NULL THEN 'fresh'
            WHEN p_kind = 'expire' THEN 'expired'
            ELSE 'any' END;

-- Moves the lots of posted entries (`p_entries[i]` is `p_postings[i]`'s
-- entry, or NULL), under the wallet locks wallet.post_entries' caller
-- holds:
-- - an increase repays the debt first (the balance was below zero), then
--   makes a lot with the rest: a paid purchase lot for a credit, a grant
--   lot for a grant (or the posting's `lot_source`), expiring at the
--   posting's `lot_expires_at`; a refund reversal refills the lots its
--   refund took;
-- - a decrease takes from the wallet's lots in spending order: a refund's
--   own purchase first, then soonest expiry (coins that never expire last),
--   free before paid (paid first with lot_settings.spend_paid_first),
--   oldest first; what no lot covers becomes debt.
-- When every wallet's moves in a call are alike (all of them make lots, or
-- all take by the same rule) they are made in a few statements whatever
-- their number; otherwise each entry's moves are made on their own, in
-- posting order. A wallet whose expiring lots changed gets its
-- next_expiry again.
CREATE OR REPLACE FUNCTION wallet.move_lots(p_postings wallet.posting[], p_entries wallet.entries[])
RETURNS VOID
LANGUAGE plpgsql
SET enable_seqscan = off
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    v_alike    BOOLEAN;
    v_makes    BOOLEAN;
    v_takes    BOOLEAN;
    v_expiring wallet.wallet_key[] := '{}';
BEGIN
    SELECT coalesce(bool_and(m.rules = 1) AND (sum(m.refills) = 0 OR sum(m.moves) = 1), TRUE),
           coalesce(bool_or(m.makes), FALSE), coalesce(bool_or(m.takes), FALSE)
    INTO v_alike, v_makes, v_takes
    FROM (SELECT count(DISTINCT (wallet.lot_delta(e.balance_after, e.amount) > 0, wallet.lot_rule(q.kind, q.hold_id),
                                 CASE WHEN e.kind = 'refund' THEN e.reference END)) AS rules,
                 count(*) FILTER (WHERE e.kind = 'refund_reversal') AS refills, count(*) AS moves,
                 bool_or(wallet.lot_delta(e.balance_after, e.amount) > 0) AS makes,
                 bool_or(wallet.lot_delta(e.balance_after, e.amount) < 0) AS takes
          FROM unnest(p_entries) WITH ORDINALITY e JOIN unnest(p_postings) WITH ORDINALITY q USING (ordinality)
          WHERE e.id IS NOT NULL AND wallet.lot_delta(e.balance_after, e.amount) <> 0
          GROUP BY e.user_id, e.currency) m;
    IF NOT v_alike THEN
        FOR i IN 1 .. cardinality(p_postings) LOOP
            IF p_entries[i].id IS NOT NULL THEN
                PERFORM wallet.move_lots(ARRAY[p_postings[i]], ARRAY[p_entries[i]]);
            END IF;
        END LOOP;
        RETURN;
    END IF;
    IF EXISTS (SELECT FROM unnest(p_entries) e
               WHERE e.kind = 'refund_reversal' AND wallet.lot_delta(e.balance_after, e.amount) > 0) THEN
        -- (the call's one move)
        PERFORM wallet.refill_lots(e) FROM unnest(p_entries) e
        WHERE e.kind = 'refund_reversal' AND wallet.lot_delta(e.balance_after, e.amount) > 0;
        RETURN;
    END IF;
    IF v_makes THEN
        v_expiring := wallet.make_lots(p_postings, p_entries);
    END IF;
    IF v_takes THEN
        v_expiring := v_expiring || wallet.take_from_lots(p_postings, p_entries);
    END IF;
    IF cardinality(v_expiring) > 0 THEN
        PERFORM wallet.keep_next_expiry(v_expiring);
    END IF;
END;
$$;

-- The increases of a call whose moves are alike (wallet.move_lots): a lot
-- each, with its entry's move. Returns the wallets that got a lot that
-- expires.
CREATE OR REPLACE FUNCTION wallet.make_lots(p_postings wallet.posting[], p_entries wallet.entries[])
RETURNS wallet.wallet_key[]
LANGUAGE plpgsql
SET enable_seqscan = off
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    v_expiring wallet.wallet_key[];
BEGIN
    WITH made AS (
        INSERT INTO wallet.lots (user_id, currency, source, paid, amount, remaining, expires_at, entry_id, flow_no)
        SELECT e.user_id, e.currency, m.source, m.source = 'purchase', m.delta, m.delta, q.lot_expires_at, e.id,
               CASE WHEN m.source IN ('purchase', 'bonus') THEN e.reference END
        FROM unnest(p_entries) WITH ORDINALITY e JOIN unnest(p_postings) WITH ORDINALITY q USING (ordinality)
        CROSS JOIN LATERAL (SELECT wallet.lot_delta(e.balance_after, e.amount) AS delta,
                                   coalesce(q.lot_source, CASE e.kind WHEN 'credit' THEN 'purchase'
                                                                      ELSE 'grant' END) AS source) m
        WHERE e.id IS NOT NULL AND m.delta > 0
        ORDER BY e.ordinality
        RETURNING lots.id, lots.entry_id, lots.amount, lots.user_id, lots.currency, lots.expires_at
    ), told AS (
        INSERT INTO wallet.entry_lots (entry_id, lot_id, amount) SELECT m.entry_id, m.id, m.amount FROM made m
    )
    SELECT array_agg(DISTINCT ROW(m.user_id, m.currency)::wallet.wallet_key) INTO v_expiring
    FROM made m WHERE m.expires_at IS NOT NULL;
    RETURN coalesce(v_expiring, '{}');
END;
$$;

-- Paid coins before free ones (true) or after them (false, the default),
-- as the service runs (WALLET_SPEND_PAID_FIRST), written at its start-up.
CREATE OR REPLACE FUNCTION wallet.set_spending_order(p_paid_first BOOLEAN) RETURNS VOID
LANGUAGE sql AS $$
    UPDATE wallet.lot_settings SET spend_paid_first = p_paid_first WHERE spend_paid_first IS DISTINCT FROM p_paid_first
$$;

-- The decreases of a call whose moves are alike (wallet.move_lots): each
-- wallet's decreases, in posting order, take consecutive stretches of its
-- lots laid end to end in spending order, so an entry takes from a lot
-- what their stretches share. Returns the wallets where it took from a
-- lot that expires. Taking more than the lots hold is a bug in the
-- caller's checks (a debit is checked against what it may spend), and
-- raises.
CREATE OR REPLACE FUNCTION wallet.take_from_lots(p_postings wallet.posting[], p_entries wallet.entries[])
RETURNS wallet.wallet_key[]
LANGUAGE plpgsql
SET enable_seqscan = off
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    v_needed   BIGINT;
    v_taken    BIGINT;
    v_expiring wallet.wallet_key[];
BEGIN
    WITH need AS (
        SELECT e.id, e.user_id, e.currency, -wallet.lot_delta(e.balance_after, e.amount) AS amount,
               sum(-wallet.lot_delta(e.balance_after, e.amount))
                   OVER (PARTITION BY e.user_id, e.currency ORDER BY e.ordinality)::BIGINT AS upto,
               wallet.lot_rule(q.kind, q.hold_id) AS rule, CASE WHEN e.kind = 'refund' THEN e.reference END AS own
        FROM unnest(p_entries) WITH ORDINALITY e JOIN unnest(p_postings) WITH ORDINALITY q USING (ordinality)
        WHERE e.id IS NOT NULL AND wallet.lot_delta(e.balance_after, e.amount) < 0
    ), pool AS (
        SELECT l.id, l.user_id, l.currency, l.remaining, l.expires_at,
               sum(l.remaining) OVER (PARTITION BY l.user_id, l.currency
                                      ORDER BY coalesce(l.paid AND l.flow_no = w.own, FALSE) DESC,
                                               l.expires_at NULLS LAST,
                                               l.paid <> (SELECT o.spend_paid_first FROM wallet.lot_settings o
                                                          WHERE o.only_row = TRUE),
                                               l.id)::BIGINT AS upto
        FROM (SELECT DISTINCT n.user_id, n.currency, n.rule, n.own FROM need n) w
        JOIN wallet.lots l ON l.user_id = w.user_id AND l.currency = w.currency AND l.open
        WHERE CASE w.rule WHEN 'fresh' THEN NOT coalesce(l.expires_at <= now(), FALSE)
                          WHEN 'expired' THEN coalesce(l.expires_at <= now(), FALSE)
                          ELSE TRUE END
    ), split AS (
        SELECT n.id AS entry_id, p.id AS lot_id, p.user_id, p.currency, p.expires_at,
               least(n.upto, p.upto) - greatest(n.upto - n.amount, p.upto - p.remaining) AS amount
        FROM need n
        JOIN pool p ON p.user_id = n.user_id AND p.currency = n.currency
                   AND p.upto - p.remaining < n.upto AND n.upto - n.amount < p.upto
    ), taken AS (
        UPDATE wallet.lots l SET remaining = l.remaining - s.amount
        FROM (SELECT s.lot_id, sum(s.amount) AS amount FROM split s GROUP BY s.lot_id) s
        WHERE l.id = s.lot_id
    ), written AS (
        INSERT INTO wallet.entry_lots (entry_id, lot_id, amount)
        SELECT s.entry_id, s.lot_id, -s.amount FROM split s
        RETURNING entry_lots.amount
    )
    SELECT (SELECT coalesce(sum(n.amount), 0) FROM need n), (SELECT coalesce(-sum(w.amount), 0) FROM written w),
           (SELECT array_agg(DISTINCT ROW(s.user_id, s.currency)::wallet.wallet_key) FROM split s
            WHERE s.expires_at IS NOT NULL)
    INTO v_needed, v_taken, v_expiring;
    IF v_needed <> v_taken THEN
        RAISE EXCEPTION 'take_from_lots: lots hold % of the % to take', v_taken, v_needed USING ERRCODE = 'WL003';
    END IF;
    RETURN coalesce(v_expiring, '{}');
END;
$$;

-- The lots' moves of a call of debits that are no captures, one per
-- wallet (wallet.post_entries decides): the common case, in one statement
-- when each wallet's first lot in spending order (wallet.take_from_lots'
-- order; a debit has no purchase of its own to take first) holds its whole
-- debit. Then the debit takes from that lot alone, as the general way would.
-- Otherwise nothing is written here and wallet.move_lots does the call. The
-- lot is updated by the row version the statement read, under the wallet
-- locks the caller holds.
CREATE OR REPLACE FUNCTION wallet.take_from_first_lots(p_postings wallet.posting[], p_entries wallet.entries[])
RETURNS VOID
LANGUAGE plpgsql
SET enable_seqscan = off
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    v_covered  BOOLEAN;
    v_expiring wallet.wallet_key[];
BEGIN
    WITH pick AS (
        SELECT e.id AS entry_id, e.user_id, e.currency, -wallet.lot_delta(e.balance_after, e.amount) AS amount,
               f.id AS lot_id, f.ctid AS lot_row, f.remaining, f.expires_at
        FROM unnest(p_entries) e
        LEFT JOIN LATERAL (
            SELECT l.id, l.ctid, l.remaining, l.expires_at FROM wallet.lots l
            WHERE l.user_id = e.user_id AND l.currency = e.currency AND l.open
              AND NOT coalesce(l.expires_at <= now(), FALSE)
            ORDER BY l.expires_at NULLS LAST,
                     l.paid <> (SELECT o.spend_paid_first FROM wallet.lot_settings o WHERE o.only_row = TRUE),
                     l.id
            LIMIT 1) f ON TRUE
        WHERE e.id IS NOT NULL AND wallet.lot_delta(e.balance_after, e.amount) < 0
    ), covered AS (
        SELECT coalesce(bool_and(coalesce(p.remaining >= p.amount, FALSE)), TRUE) AS yes FROM pick p
    ), taken AS (
        UPDATE wallet.lots l SET remaining = l.remaining - p.amount
        FROM pick p, covered c
        WHERE c.yes AND l.ctid = p.lot_row
    ), written AS (
        INSERT INTO wallet.entry_lots (entry_id, lot_id, amount)
        SELECT p.entry_id, p.lot_id, -p.amount FROM pick p, covered c WHERE c.yes
    )
    SELECT c.yes, (SELECT array_agg(DISTINCT ROW(p.user_id, p.currency)::wallet.wallet_key) FROM pick p
                   WHERE p.expires_at IS NOT NULL)
    INTO v_covered, v_expiring
    FROM covered c;
    IF NOT v_covered THEN
        PERFORM wallet.move_lots(p_postings, p_entries);
    ELSIF v_expiring IS NOT NULL THEN
        PERFORM wallet.keep_next_expiry(v_expiring);
    END IF;
END;
$$;

-- A refund reversal's lots: what the refunds it reverses (those of its
-- currency since the credit's last reversal of it) took goes back to the lots they took it from;
-- what they left as debt, if the debt was repaid since, makes a new lot of
-- the purchase.
CREATE OR REPLACE FUNCTION wallet.refill_lots(p_entry wallet.entries)
RETURNS VOID
LANGUAGE plpgsql AS $$
DECLARE
    v_left BIGINT := wallet.lot_delta(p_entry.balance_after, p_entry.amount);
    v_took RECORD;
    v_lot  BIGINT;
BEGIN
    FOR v_took IN
        SELECT t.lot_id, -sum(t.amount) AS amount
        FROM wallet.entry_lots t
        JOIN wallet.unreversed_refunds(p_entry.reference, p_entry.currency, p_entry.id) r ON r.id = t.entry_id
        GROUP BY t.lot_id
        ORDER BY t.lot_id
    LOOP
        EXIT WHEN v_left = 0;
        UPDATE wallet.lots l SET remaining = l.remaining + least(v_left, v_took.amount) WHERE l.id = v_took.lot_id;
        INSERT INTO wallet.entry_lots (entry_id, lot_id, amount)
        VALUES (p_entry.id, v_took.lot_id, least(v_left, v_took.amount));
        v_left := v_left - least(v_left, v_took.amount);
    END LOOP;
    IF v_left > 0 THEN
        INSERT INTO wallet.lots (user_id, currency, source, paid, amount, remaining, entry_id, flow_no)
        VALUES (p_entry.user_id, p_entry.currency, 'purchase', TRUE, v_left, v_left, p_entry.id, p_entry.reference)
        RETURNING id INTO v_lot;
        INSERT INTO wallet.entry_lots (entry_id, lot_id, amount) VALUES (p_entry.id, v_lot, v_left);
    END IF;
    PERFORM wallet.keep_next_expiry(ARRAY[ROW(p_entry.user_id, p_entry.currency)::wallet.wallet_key]);
END;
$$;

-- Sets the wallets' next_expiry to the soonest expiry among their open
-- lots (NULL when none expires), once their lots have moved.
CREATE OR REPLACE FUNCTION wallet.keep_next_expiry(p_wallets wallet.wallet_key[])
RETURNS VOID
LANGUAGE sql AS $$
    UPDATE wallet.wallets w
    SET next_expiry = (SELECT min(l.expires_at) FROM wallet.lots l
                       WHERE l.user_id = w.user_id AND l.currency = w.currency AND l.open)
    WHERE (w.user_id, w.currency) IN (SELECT k.user_id, k.currency FROM unnest(p_wallets) k)
$$;
