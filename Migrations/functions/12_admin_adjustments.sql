-- Grants and revokes (Scripts/admin/grant.sql and revoke.sql), re-applied
-- by the migrator whenever this file changes (first defined in
-- 0003_admin_and_invariants.sql; posted through wallet.post_entries since
-- 0017).
--
-- Lock order (01_lock_flow_nos.sql): a grant or revoke takes its wallet's
-- row lock and nothing else.

-- A value an admin script must be given; raises WL003 naming it when it
-- is missing or blank.
CREATE OR REPLACE FUNCTION wallet.require_text(p_name TEXT, p_value TEXT) RETURNS TEXT
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    IF p_value IS NULL OR btrim(p_value) = '' THEN
        RAISE EXCEPTION '% is required', p_name USING ERRCODE = 'WL003';
    END IF;
    RETURN p_value;
END;
$$;

-- The reference of a grant or revoke: the one given, or, without one, one
-- the arguments name, so the same script line run twice applies once.
-- (A grant's expiry is named only when it has one, so references derived
-- before grants could expire stay what they were.)
CREATE OR REPLACE FUNCTION wallet.adjustment_reference(
    p_kind TEXT, p_user_id TEXT, p_amount BIGINT, p_currency TEXT, p_reason TEXT, p_operator TEXT, p_reference TEXT,
    p_expires_in_days INTEGER DEFAULT NULL)
RETURNS TEXT
LANGUAGE sql STABLE
RETURN coalesce(nullif(btrim(p_reference), ''),
    p_kind || ':' || left(encode(sha256(convert_to(
        concat_ws(E'\x1f', p_user_id, p_amount::TEXT, p_currency, p_reason, p_operator, p_expires_in_days::TEXT),
        'UTF8')), 'hex'), 32));

-- Shared body of grant and revoke: a `grant` or `revoke` entry under its
-- reference, applied once; the same reference again answers
-- already_applied, and for another amount raises WL007 (an operator's
-- mistake, not a retry). A revoke that would leave the balance below zero
-- raises WL004 unless `p_allow_negative`, which the entry then records.
-- A grant with `p_expires_in_days` makes a lot that expires that many days
-- from now. Audited in wallet.admin_audit.
CREATE OR REPLACE FUNCTION wallet.adjust_balance(
    p_kind TEXT, p_user_id TEXT, p_amount BIGINT, p_currency TEXT, p_reason TEXT, p_operator TEXT,
    p_reference TEXT, p_allow_negative BOOLEAN, p_expires_in_days INTEGER DEFAULT NULL)
RETURNS TABLE (outcome TEXT, entry_id BIGINT, balance BIGINT, reference TEXT)
LANGUAGE plpgsql AS $$
DECLARE
    v_balance BIGINT;
    v_signed  BIGINT := CASE WHEN p_kind = 'grant' THEN p_amount ELSE -p_amount END;
    v_applied wallet.entries;
    v_entry   wallet.entries;
BEGIN
    PERFORM wallet.require_text('operator', p_operator);
    PERFORM wallet.require_text('reason', p_reason);
    IF p_user_id IS NULL OR length(p_user_id) NOT BETWEEN 1 AND 128 OR p_user_id ~ '[^A-Za-z0-9._:@-]' THEN
        RAISE EXCEPTION 'user_id must be 1-128 characters of [A-Za-z0-9._:@-]' USING ERRCODE = 'WL003';
    END IF;
    IF p_amount IS NULL OR p_amount NOT BETWEEN 1 AND 1000000000000 THEN
        RAISE EXCEPTION 'amount must be between 1 and 10^12, got %', p_amount USING ERRCODE = 'WL003';
    END IF;
    IF NOT EXISTS (SELECT 1 FROM wallet.currencies c WHERE c.code = p_currency) THEN
        RAISE EXCEPTION 'unknown currency %', p_currency USING ERRCODE = 'WL005';
    END IF;
    IF p_expires_in_days IS NOT NULL AND (p_kind <> 'grant' OR p_expires_in_days NOT BETWEEN 1 AND 3650) THEN
        RAISE EXCEPTION 'expires_in_days must be between 1 and 3650, and only for a grant' USING ERRCODE = 'WL003';
    END IF;
    reference := wallet.adjustment_reference(p_kind, p_user_id, p_amount, p_currency, p_reason, p_operator,
                                             p_reference, p_expires_in_days);

    INSERT INTO wallet.wallets (user_id, currency) VALUES (p_user_id, p_currency) ON CONFLICT DO NOTHING;
    SELECT w.balance INTO v_balance FROM wallet.wallets w
    WHERE w.user_id = p_user_id AND w.currency = p_currency
    FOR UPDATE;

    SELECT * INTO v_applied FROM wallet.entries e
    WHERE e.user_id = p_user_id AND e.currency = p_currency AND e.kind = p_kind AND e.reference = adjust_balance.reference;
    IF v_applied.id IS NOT NULL THEN
        IF v_applied.amount <> v_signed THEN
            RAISE EXCEPTION 'reference % was already used for a % of % (entry %)',
                adjust_balance.reference, p_kind, abs(v_applied.amount), v_applied.id USING ERRCODE = 'WL007';
        END IF;
        outcome := 'already_applied';
        entry_id := v_applied.id;
        balance := v_balance;
    ELSE
        IF p_kind = 'revoke' AND v_balance + v_signed < 0 AND NOT coalesce(p_allow_negative, FALSE) THEN
            RAISE EXCEPTION 'revoking % would leave a balance of %; pass allow_negative to allow it',
                p_amount, v_balance + v_signed USING ERRCODE = 'WL004';
        END IF;
        v_entry := (wallet.post_entries(ARRAY[wallet.new_posting(
            p_kind => p_kind, p_user_id => p_user_id, p_currency => p_currency, p_amount => v_signed,
            p_reference => adjust_balance.reference, p_client => 'admin',
            p_metadata => jsonb_build_object('operator', p_operator, 'reason', p_reason)
                          || CASE WHEN p_kind = 'revoke' AND v_balance + v_signed < 0
                                  THEN jsonb_build_object('allow_negative', TRUE) ELSE '{}'::JSONB END
                          || jsonb_strip_nulls(jsonb_build_object('expires_in_days', p_expires_in_days)),
            p_lot_expires_at => now() + make_interval(days => p_expires_in_days))]))[1];
        outcome := CASE WHEN p_kind = 'grant' THEN 'granted' ELSE 'revoked' END;
        entry_id := v_entry.id;
        balance := v_entry.balance_after;
    END IF;

    INSERT INTO wallet.admin_audit (action, operator, reason, arguments, outcome, entry_ids)
    VALUES (p_kind, p_operator, p_reason,
            jsonb_build_object('user_id', p_user_id, 'amount', p_amount, 'currency', p_currency,
                               'reference', adjust_balance.reference,
                               'allow_negative', coalesce(p_allow_negative, FALSE))
            || jsonb_strip_nulls(jsonb_build_object('expires_in_days', p_expires_in_days)),
            outcome, CASE WHEN v_entry.id IS NULL THEN '{}'::BIGINT[] ELSE ARRAY[v_entry.id] END);
    RETURN NEXT;
END;
$$;

-- Adds coins to a wallet as a `grant` entry, in a lot that expires after
-- `p_expires_in_days` when given.
CREATE OR REPLACE FUNCTION wallet.grant_coins(
    p_user_id TEXT, p_amount BIGINT, p_currency TEXT, p_reason TEXT, p_operator TEXT, p_reference TEXT DEFAULT NULL,
    p_expires_in_days INTEGER DEFAULT NULL)
RETURNS TABLE (outcome TEXT, entry_id BIGINT, balance BIGINT, reference TEXT)
LANGUAGE sql AS $$
    SELECT * FROM wallet.adjust_balance('grant', p_user_id, p_amount, p_currency, p_reason, p_operator, p_reference,
                                        FALSE, p_expires_in_days);
$$;

-- Takes coins back as a `revoke` entry; refuses to go below zero unless
-- `p_allow_negative`.
CREATE OR REPLACE FUNCTION wallet.revoke_coins(
    p_user_id TEXT, p_amount BIGINT, p_currency TEXT, p_reason TEXT, p_operator TEXT,
    p_allow_negative BOOLEAN DEFAULT FALSE, p_reference TEXT DEFAULT NULL)
RETURNS TABLE (outcome TEXT, entry_id BIGINT, balance BIGINT, reference TEXT)
LANGUAGE sql AS $$
    SELECT * FROM wallet.adjust_balance('revoke', p_user_id, p_amount, p_currency, p_reason, p_operator, p_reference,
                                        p_allow_negative);
$$;
