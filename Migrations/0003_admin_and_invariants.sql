-- What operators do through psql (refunds, grants, revokes, catalog changes),
-- the audit trail that records it, and the invariant check that the service's
-- `wallet check` and the admin `check.sql` share.

-- Every admin action, who did it and why. Append-only.
CREATE TABLE wallet.admin_audit (
    id           BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    action       TEXT NOT NULL CHECK (action IN ('refund', 'grant', 'revoke', 'product')),
    operator     TEXT NOT NULL CHECK (length(operator) BETWEEN 1 AND 200),
    db_user      TEXT NOT NULL DEFAULT session_user,
    reason       TEXT,
    arguments    JSONB NOT NULL,
    outcome      TEXT NOT NULL,
    entry_ids    BIGINT[] NOT NULL DEFAULT '{}',
    created_at   TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE TRIGGER admin_audit_append_only BEFORE UPDATE OR DELETE ON wallet.admin_audit
    FOR EACH ROW EXECUTE FUNCTION wallet.refuse_change();
CREATE TRIGGER admin_audit_no_truncate BEFORE TRUNCATE ON wallet.admin_audit
    FOR EACH STATEMENT EXECUTE FUNCTION wallet.refuse_change();

-- A grant or revoke is identified by its reference; the same one twice is
-- applied once.
CREATE UNIQUE INDEX entries_admin_reference ON wallet.entries (user_id, currency, kind, reference)
    WHERE kind IN ('grant', 'revoke');
-- A credit entry per flowNO, at most.
CREATE UNIQUE INDEX entries_credit_reference ON wallet.entries (reference) WHERE kind = 'credit';

CREATE FUNCTION wallet.require_text(p_name TEXT, p_value TEXT) RETURNS TEXT
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    IF p_value IS NULL OR btrim(p_value) = '' THEN
        RAISE EXCEPTION '% is required', p_name USING ERRCODE = 'WL003';
    END IF;
    RETURN p_value;
END;
$$;

-- Locks a credit for a refund or its reversal, in the service's lock
-- order: its wallet first, then the credit row. Returns both as they are
-- once locked. An unknown flowNO raises WL002, naming it.
CREATE FUNCTION wallet.lock_credit(p_flow_no TEXT, OUT credit wallet.credits, OUT balance BIGINT)
LANGUAGE plpgsql AS $$
BEGIN
    SELECT * INTO credit FROM wallet.credits c WHERE c.flow_no = p_flow_no;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no credit for flowNO %', p_flow_no USING ERRCODE = 'WL002';
    END IF;
    SELECT w.balance INTO balance FROM wallet.wallets w
    WHERE w.user_id = credit.user_id AND w.currency = credit.currency
    FOR UPDATE;
    SELECT * INTO credit FROM wallet.credits c WHERE c.flow_no = p_flow_no FOR UPDATE;
END;
$$;

-- Refunds a credit: a `refund` entry for the stored credited amount (or the
-- given part of it), and the credit's status becomes `refunded`. The balance
-- may go below zero; debits are refused until it is positive again.
--
-- Outcomes: refunded, already_refunded (nothing changes). An unknown flowNO
-- raises WL002. `p_source` is 'admin' (audited here) or 'apple' (recorded by
-- the notification that caused it).
CREATE FUNCTION wallet.refund_credit(
    p_flow_no TEXT, p_reason TEXT, p_operator TEXT,
    p_amount BIGINT DEFAULT NULL, p_source TEXT DEFAULT 'admin', p_client TEXT DEFAULT 'admin')
RETURNS TABLE (outcome TEXT, entry_id BIGINT, amount BIGINT, balance BIGINT, user_id TEXT, currency TEXT)
LANGUAGE plpgsql AS $$
DECLARE
    v_locked  RECORD;
    v_credit  wallet.credits;
    v_balance BIGINT;
    v_amount  BIGINT;
    v_entry   BIGINT;
BEGIN
    IF p_source NOT IN ('admin', 'apple') THEN
        RAISE EXCEPTION 'refund source must be admin or apple' USING ERRCODE = 'WL003';
    END IF;
    IF p_source = 'admin' THEN
        PERFORM wallet.require_text('operator', p_operator);
        PERFORM wallet.require_text('reason', p_reason);
    END IF;
    SELECT * INTO v_locked FROM wallet.lock_credit(p_flow_no);
    v_credit := v_locked.credit;
    v_balance := v_locked.balance;

    user_id := v_credit.user_id;
    currency := v_credit.currency;
    IF v_credit.status = 'refunded' THEN
        outcome := 'already_refunded';
        amount := 0;
        balance := v_balance;
    ELSE
        v_amount := coalesce(p_amount, v_credit.amount);
        IF v_amount NOT BETWEEN 1 AND v_credit.amount THEN
            RAISE EXCEPTION 'refund amount % is outside 1..%', v_amount, v_credit.amount USING ERRCODE = 'WL003';
        END IF;
        v_entry := nextval('wallet.entries_id_seq');
        v_balance := v_balance - v_amount;
        UPDATE wallet.wallets w SET balance = v_balance, updated_at = now()
        WHERE w.user_id = v_credit.user_id AND w.currency = v_credit.currency;
        INSERT INTO wallet.entries (id, user_id, currency, amount, balance_after, kind, reference, client, metadata)
        VALUES (v_entry, v_credit.user_id, v_credit.currency, -v_amount, v_balance, 'refund', p_flow_no, p_client,
                jsonb_strip_nulls(jsonb_build_object('source', p_source, 'operator', p_operator, 'reason', p_reason)));
        UPDATE wallet.credits c SET status = 'refunded', refunded_by = p_source, refunded_amount = v_amount,
                                    updated_at = now()
        WHERE c.flow_no = p_flow_no;
        outcome := 'refunded';
        entry_id := v_entry;
        amount := v_amount;
        balance := v_balance;
    END IF;

    IF p_source = 'admin' THEN
        INSERT INTO wallet.admin_audit (action, operator, reason, arguments, outcome, entry_ids)
        VALUES ('refund', p_operator, p_reason,
                jsonb_build_object('flow_no', p_flow_no, 'amount', p_amount), outcome,
                CASE WHEN v_entry IS NULL THEN '{}'::BIGINT[] ELSE ARRAY[v_entry] END);
    END IF;
    RETURN NEXT;
END;
$$;

-- Undoes Apple's refund of a credit once (REFUND_REVERSED): a
-- `refund_reversal` entry for the refunded amount, and the credit is
-- `credited` again. Only a refund that came from Apple is reversed this way.
--
-- Outcomes: reversed, not_refunded, not_reversible (an admin refund).
-- An unknown flowNO raises WL002.
CREATE FUNCTION wallet.reverse_refund(p_flow_no TEXT, p_client TEXT DEFAULT 'appstore')
RETURNS TABLE (outcome TEXT, entry_id BIGINT, amount BIGINT, balance BIGINT, user_id TEXT, currency TEXT)
LANGUAGE plpgsql AS $$
DECLARE
    v_locked  RECORD;
    v_credit  wallet.credits;
    v_balance BIGINT;
    v_entry   BIGINT;
BEGIN
    SELECT * INTO v_locked FROM wallet.lock_credit(p_flow_no);
    v_credit := v_locked.credit;
    v_balance := v_locked.balance;

    user_id := v_credit.user_id;
    currency := v_credit.currency;
    amount := 0;
    balance := v_balance;
    IF v_credit.status <> 'refunded' THEN
        outcome := 'not_refunded';
    ELSIF v_credit.refunded_by <> 'apple' THEN
        outcome := 'not_reversible';
    ELSE
        v_entry := nextval('wallet.entries_id_seq');
        v_balance := v_balance + v_credit.refunded_amount;
        UPDATE wallet.wallets w SET balance = v_balance, updated_at = now()
        WHERE w.user_id = v_credit.user_id AND w.currency = v_credit.currency;
        INSERT INTO wallet.entries (id, user_id, currency, amount, balance_after, kind, reference, client, metadata)
        VALUES (v_entry, v_credit.user_id, v_credit.currency, v_credit.refunded_amount, v_balance,
                'refund_reversal', p_flow_no, p_client, jsonb_build_object('source', 'apple'));
        UPDATE wallet.credits c SET status = 'credited', refunded_by = NULL, refunded_amount = NULL, updated_at = now()
        WHERE c.flow_no = p_flow_no;
        outcome := 'reversed';
        entry_id := v_entry;
        amount := v_credit.refunded_amount;
        balance := v_balance;
    END IF;
    RETURN NEXT;
END;
$$;

-- Shared body of grant and revoke.
CREATE FUNCTION wallet.adjust_balance(
    p_kind TEXT, p_user_id TEXT, p_amount BIGINT, p_currency TEXT, p_reason TEXT, p_operator TEXT,
    p_reference TEXT, p_allow_negative BOOLEAN)
RETURNS TABLE (outcome TEXT, entry_id BIGINT, balance BIGINT, reference TEXT)
LANGUAGE plpgsql AS $$
DECLARE
    v_balance   BIGINT;
    v_entry     BIGINT;
    v_reference TEXT;
    v_signed    BIGINT;
    v_applied   BIGINT;
BEGIN
    PERFORM wallet.require_text('operator', p_operator);
    PERFORM wallet.require_text('reason', p_reason);
    IF p_user_id IS NULL OR length(p_user_id) NOT BETWEEN 1 AND 128 OR p_user_id ~ '[^A-Za-z0-9._:@-]' THEN
        RAISE EXCEPTION 'user_id must be 1-128 characters of [A-Za-z0-9._:@-]' USING ERRCODE = 'WL003';
    END IF;
    IF p_amount IS NULL OR p_amount NOT BETWEEN 1 AND 1000000000000 THEN
        RAISE EXCEPTION 'amount must be between 1 and 10^12, got %', p_amount USING ERRCODE = 'WL003';
    END IF;
    IF NOT EXISTS (SELECT 1 FROM wallet.products p WHERE p.currency = p_currency) THEN
        RAISE EXCEPTION 'unknown currency %', p_currency USING ERRCODE = 'WL005';
    END IF;
    -- Without an explicit reference the arguments name the action, so the
    -- same script line run twice applies once.
    v_reference := coalesce(nullif(btrim(p_reference), ''),
        p_kind || ':' || left(encode(sha256(convert_to(
            concat_ws(E'\x1f', p_user_id, p_amount::TEXT, p_currency, p_reason, p_operator), 'UTF8')), 'hex'), 32));

    INSERT INTO wallet.wallets (user_id, currency) VALUES (p_user_id, p_currency) ON CONFLICT DO NOTHING;
    SELECT w.balance INTO v_balance FROM wallet.wallets w
    WHERE w.user_id = p_user_id AND w.currency = p_currency
    FOR UPDATE;

    reference := v_reference;
    v_signed := CASE WHEN p_kind = 'grant' THEN p_amount ELSE -p_amount END;
    SELECT e.id, e.amount INTO v_entry, v_applied FROM wallet.entries e
    WHERE e.user_id = p_user_id AND e.currency = p_currency AND e.kind = p_kind AND e.reference = v_reference;
    IF FOUND THEN
        -- A reference names one action. Reused for another amount it is an
        -- operator's mistake, not a retry: refuse it rather than report the
        -- earlier action as this one.
        IF v_applied <> v_signed THEN
            RAISE EXCEPTION 'reference % was already used for a % of % (entry %)',
                v_reference, p_kind, abs(v_applied), v_entry USING ERRCODE = 'WL007';
        END IF;
        outcome := 'already_applied';
        entry_id := v_entry;
        balance := v_balance;
    ELSE
        IF p_kind = 'revoke' AND v_balance + v_signed < 0 AND NOT coalesce(p_allow_negative, FALSE) THEN
            RAISE EXCEPTION 'revoking % would leave a balance of %; pass allow_negative to allow it',
                p_amount, v_balance + v_signed USING ERRCODE = 'WL004';
        END IF;
        v_entry := nextval('wallet.entries_id_seq');
        v_balance := v_balance + v_signed;
        UPDATE wallet.wallets w SET balance = v_balance, updated_at = now()
        WHERE w.user_id = p_user_id AND w.currency = p_currency;
        INSERT INTO wallet.entries (id, user_id, currency, amount, balance_after, kind, reference, client, metadata)
        VALUES (v_entry, p_user_id, p_currency, v_signed, v_balance, p_kind, v_reference, 'admin',
                jsonb_build_object('operator', p_operator, 'reason', p_reason)
                || CASE WHEN v_balance < 0 AND p_kind = 'revoke'
                        THEN jsonb_build_object('allow_negative', TRUE) ELSE '{}'::JSONB END);
        outcome := CASE WHEN p_kind = 'grant' THEN 'granted' ELSE 'revoked' END;
        entry_id := v_entry;
        balance := v_balance;
    END IF;

    INSERT INTO wallet.admin_audit (action, operator, reason, arguments, outcome, entry_ids)
    VALUES (p_kind, p_operator, p_reason,
            jsonb_build_object('user_id', p_user_id, 'amount', p_amount, 'currency', p_currency,
                               'reference', v_reference, 'allow_negative', coalesce(p_allow_negative, FALSE)),
            outcome, CASE WHEN outcome = 'already_applied' THEN '{}'::BIGINT[] ELSE ARRAY[v_entry] END);
    RETURN NEXT;
END;
$$;

-- Adds coins to a wallet as a `grant` entry.
CREATE FUNCTION wallet.grant_coins(
    p_user_id TEXT, p_amount BIGINT, p_currency TEXT, p_reason TEXT, p_operator TEXT, p_reference TEXT DEFAULT NULL)
RETURNS TABLE (outcome TEXT, entry_id BIGINT, balance BIGINT, reference TEXT)
LANGUAGE sql AS $$
    SELECT * FROM wallet.adjust_balance('grant', p_user_id, p_amount, p_currency, p_reason, p_operator, p_reference, FALSE);
$$;

-- Takes coins back as a `revoke` entry; refuses to go below zero unless
-- `p_allow_negative`.
CREATE FUNCTION wallet.revoke_coins(
    p_user_id TEXT, p_amount BIGINT, p_currency TEXT, p_reason TEXT, p_operator TEXT,
    p_allow_negative BOOLEAN DEFAULT FALSE, p_reference TEXT DEFAULT NULL)
RETURNS TABLE (outcome TEXT, entry_id BIGINT, balance BIGINT, reference TEXT)
LANGUAGE sql AS $$
    SELECT * FROM wallet.adjust_balance('revoke', p_user_id, p_amount, p_currency, p_reason, p_operator, p_reference,
                                        p_allow_negative);
$$;

-- Adds or changes a catalog entry. Past credits keep their stored amount.
-- Without an operator, the audit names the database session user. A NULL
-- `p_active` keeps a product's current flag (a new one is active), so a
-- price change does not put a product that was taken off sale back on it.
CREATE FUNCTION wallet.upsert_product(
    p_product_id TEXT, p_amount BIGINT, p_currency TEXT, p_active BOOLEAN DEFAULT TRUE,
    p_operator TEXT DEFAULT NULL, p_reason TEXT DEFAULT NULL)
RETURNS TABLE (outcome TEXT, product_id TEXT, currency TEXT, amount BIGINT, active BOOLEAN)
LANGUAGE plpgsql AS $$
DECLARE
    v_existed BOOLEAN;
    v_operator TEXT := coalesce(nullif(btrim(p_operator), ''), session_user);
BEGIN
    IF p_product_id IS NULL OR length(p_product_id) NOT BETWEEN 1 AND 128 OR p_product_id ~ '[^A-Za-z0-9._-]' THEN
        RAISE EXCEPTION 'product_id must be 1-128 characters of [A-Za-z0-9._-]' USING ERRCODE = 'WL003';
    END IF;
    IF p_amount IS NULL OR p_amount NOT BETWEEN 1 AND 1000000000000 THEN
        RAISE EXCEPTION 'amount must be between 1 and 10^12, got %', p_amount USING ERRCODE = 'WL003';
    END IF;
    IF p_currency IS NULL OR length(p_currency) NOT BETWEEN 1 AND 32 OR p_currency !~ '^[a-z]' OR p_currency ~ '[^a-z0-9_]' THEN
        RAISE EXCEPTION 'currency must match [a-z][a-z0-9_]{0,31}' USING ERRCODE = 'WL003';
    END IF;
    SELECT TRUE INTO v_existed FROM wallet.products p WHERE p.product_id = p_product_id FOR UPDATE;
    INSERT INTO wallet.products AS p (product_id, currency, amount, active)
    VALUES (p_product_id, p_currency, p_amount, coalesce(p_active, TRUE))
    ON CONFLICT ON CONSTRAINT products_pkey DO UPDATE
        SET currency = EXCLUDED.currency, amount = EXCLUDED.amount, active = coalesce(p_active, p.active),
            updated_at = now()
    RETURNING p.product_id, p.currency, p.amount, p.active INTO product_id, currency, amount, active;
    outcome := CASE WHEN v_existed THEN 'updated' ELSE 'created' END;
    INSERT INTO wallet.admin_audit (action, operator, reason, arguments, outcome)
    VALUES ('product', v_operator, p_reason,
            jsonb_build_object('product_id', p_product_id, 'amount', p_amount, 'currency', p_currency,
                               'active', active),
            outcome);
    RETURN NEXT;
END;
$$;

-- Every broken rule of the books, one row each; none when they balance.
CREATE FUNCTION wallet.check_invariants()
RETURNS TABLE (invariant TEXT, subject TEXT, detail TEXT)
LANGUAGE sql STABLE AS $$
    -- A wallet's balance is the sum of its entries.
    SELECT 'balance_matches_ledger', w.user_id || '/' || w.currency,
           format('balance %s, ledger sum %s', w.balance, coalesce(s.total, 0))
    FROM wallet.wallets w
    LEFT JOIN (SELECT e.user_id, e.currency, sum(e.amount) AS total
               FROM wallet.entries e GROUP BY e.user_id, e.currency) s
      ON s.user_id = w.user_id AND s.currency = w.currency
    WHERE w.balance <> coalesce(s.total, 0)
    UNION ALL
    -- Every entry belongs to a wallet.
    SELECT 'entry_has_wallet', e.user_id || '/' || e.currency, format('entry %s has no wallet', e.id)
    FROM wallet.entries e
    WHERE NOT EXISTS (SELECT 1 FROM wallet.wallets w WHERE w.user_id = e.user_id AND w.currency = e.currency)
    UNION ALL
    -- balance_after values chain along id order, and end at the balance.
    SELECT 'balance_after_chain', c.user_id || '/' || c.currency,
           format('entry %s: balance_after %s, expected %s', c.id, c.balance_after, c.expected)
    FROM (SELECT e.id, e.user_id, e.currency, e.balance_after,
                 sum(e.amount) OVER (PARTITION BY e.user_id, e.currency ORDER BY e.id) AS expected
          FROM wallet.entries e) c
    WHERE c.balance_after <> c.expected
    UNION ALL
    -- Each credit has exactly its one credit entry, for its stored amount.
    SELECT 'credit_has_one_entry', cr.flow_no,
           format('credit entry %s does not match the credit', cr.entry_id)
    FROM wallet.credits cr
    LEFT JOIN wallet.entries e ON e.id = cr.entry_id
    WHERE e.id IS NULL OR e.kind <> 'credit' OR e.reference <> cr.flow_no OR e.amount <> cr.amount
       OR e.user_id <> cr.user_id OR e.currency <> cr.currency
    UNION ALL
    SELECT 'credit_entry_has_credit', e.reference, format('credit entry %s has no credit row', e.id)
    FROM wallet.entries e
    LEFT JOIN wallet.credits cr ON cr.entry_id = e.id
    WHERE e.kind = 'credit' AND cr.flow_no IS NULL
    UNION ALL
    -- Refunds and reversals of a credit alternate, starting with a refund,
    -- and the status says which came last.
    SELECT 'refunds_alternate', r.reference, format('entry %s (%s) is out of turn', r.id, r.kind)
    FROM (SELECT e.id, e.kind, e.reference,
                 lag(e.kind) OVER (PARTITION BY e.reference ORDER BY e.id) AS previous
          FROM wallet.entries e WHERE e.kind IN ('refund', 'refund_reversal')) r
    WHERE (r.previous IS NULL AND r.kind <> 'refund') OR r.previous = r.kind
    UNION ALL
    SELECT 'refund_entry_has_credit', e.reference, format('entry %s refers to no credit of that wallet', e.id)
    FROM wallet.entries e
    LEFT JOIN wallet.credits cr ON cr.flow_no = e.reference AND cr.user_id = e.user_id AND cr.currency = e.currency
    WHERE e.kind IN ('refund', 'refund_reversal') AND cr.flow_no IS NULL
    UNION ALL
    SELECT 'credit_status_matches_ledger', cr.flow_no,
           format('status %s, last refund entry %s', cr.status, coalesce(l.kind, 'none'))
    FROM wallet.credits cr
    LEFT JOIN LATERAL (SELECT e.kind FROM wallet.entries e
                       WHERE e.reference = cr.flow_no AND e.kind IN ('refund', 'refund_reversal')
                       ORDER BY e.id DESC LIMIT 1) l ON TRUE
    WHERE (cr.status = 'refunded') <> (l.kind IS NOT DISTINCT FROM 'refund')
    UNION ALL
    -- A balance goes below zero only through a refund or an allowed revoke.
    SELECT 'negative_only_by_refund_or_allowed_revoke', e.user_id || '/' || e.currency,
           format('entry %s (%s) left balance %s', e.id, e.kind, e.balance_after)
    FROM wallet.entries e
    WHERE e.amount < 0 AND e.balance_after < 0 AND NOT (
        e.kind = 'refund' OR (e.kind = 'revoke' AND (e.metadata ->> 'allow_negative')::BOOLEAN IS TRUE))
    UNION ALL
    -- Each stored debit outcome points at its entry, for its amount.
    SELECT 'debit_key_has_entry', k.client || '/' || k.key, format('entry %s does not match', k.entry_id)
    FROM wallet.idempotency_keys k
    LEFT JOIN wallet.entries e ON e.id = k.entry_id
    WHERE k.outcome = 'debited'
      AND (e.id IS NULL OR e.kind <> 'debit' OR e.reference <> k.key OR e.client <> k.client
           OR -e.amount <> (k.response -> 'debit' ->> 'amount')::BIGINT)
    ORDER BY 1, 2, 3;
$$;

-- Credits, refunds, debits and net coins per product and per day, for finance.
CREATE FUNCTION wallet.report(p_since TIMESTAMPTZ DEFAULT '-infinity')
RETURNS TABLE (day DATE, product_id TEXT, currency TEXT, credits BIGINT, credited BIGINT,
               refunds BIGINT, refunded BIGINT, debits BIGINT, debited BIGINT, net BIGINT)
LANGUAGE sql STABLE AS $$
    SELECT (e.created_at AT TIME ZONE 'UTC')::DATE AS day,
           coalesce(cr.product_id, CASE WHEN e.kind = 'debit' THEN '(debits)' ELSE '(' || e.kind || ')' END),
           e.currency,
           count(*) FILTER (WHERE e.kind = 'credit'),
           coalesce(sum(e.amount) FILTER (WHERE e.kind = 'credit'), 0),
           count(*) FILTER (WHERE e.kind = 'refund'),
           coalesce(-sum(e.amount) FILTER (WHERE e.kind = 'refund'), 0),
           count(*) FILTER (WHERE e.kind = 'debit'),
           coalesce(-sum(e.amount) FILTER (WHERE e.kind = 'debit'), 0),
           sum(e.amount)
    FROM wallet.entries e
    LEFT JOIN wallet.credits cr ON cr.flow_no = e.reference AND e.kind IN ('credit', 'refund', 'refund_reversal')
    WHERE e.created_at >= p_since
    GROUP BY 1, 2, 3
    ORDER BY 1, 2, 3;
$$;
