-- wallet.upsert_product and wallet.upsert_currency, re-applied by the
-- migrator whenever this file changes (upsert_product first defined in
-- 0003_admin_and_invariants.sql; the Google Play product id since 0012,
-- which dropped the six-argument form; currencies since 0028; bonuses and
-- paid currencies since 0030, which dropped the forms without them; other
-- lines since 0032, which dropped the form without them).

-- Adds a currency, renames one (its code never changes: wallets, the
-- ledger and products name it), or says whether it is paid: made by
-- purchases alone, so the game server may not grant it. A NULL `p_paid`
-- keeps the flag (a new currency is not paid). Audited; without an
-- operator, the audit names the database session user. Outcomes: created,
-- updated, unchanged.
CREATE OR REPLACE FUNCTION wallet.upsert_currency(
    p_code TEXT, p_name TEXT, p_operator TEXT DEFAULT NULL, p_reason TEXT DEFAULT NULL, p_paid BOOLEAN DEFAULT NULL)
RETURNS TABLE (outcome TEXT, code TEXT, name TEXT, paid BOOLEAN)
LANGUAGE plpgsql AS $$
DECLARE
    v_current  wallet.currencies;
    v_operator TEXT := coalesce(nullif(btrim(p_operator), ''), session_user);
BEGIN
    IF p_code IS NULL OR length(p_code) NOT BETWEEN 1 AND 32 OR p_code !~ '^[a-z]' OR p_code ~ '[^a-z0-9_]' THEN
        RAISE EXCEPTION 'code must match [a-z][a-z0-9_]{0,31}' USING ERRCODE = 'WL003';
    END IF;
    IF p_name IS NULL OR length(btrim(p_name)) NOT BETWEEN 1 AND 64 THEN
        RAISE EXCEPTION 'name must be 1-64 characters' USING ERRCODE = 'WL003';
    END IF;
    SELECT * INTO v_current FROM wallet.currencies c WHERE c.code = p_code FOR UPDATE;
    INSERT INTO wallet.currencies AS c (code, name, paid) VALUES (p_code, btrim(p_name), coalesce(p_paid, FALSE))
    ON CONFLICT ON CONSTRAINT currencies_pkey DO UPDATE
        SET name = EXCLUDED.name, paid = coalesce(p_paid, c.paid), updated_at = now()
    RETURNING c.code, c.name, c.paid INTO code, name, paid;
    outcome := CASE WHEN v_current.code IS NULL THEN 'created'
                    WHEN v_current.name = btrim(p_name) AND v_current.paid = paid THEN 'unchanged'
                    ELSE 'updated' END;
    INSERT INTO wallet.admin_audit (action, operator, reason, arguments, outcome)
    VALUES ('currency', v_operator, p_reason,
            jsonb_build_object('code', p_code, 'name', btrim(p_name), 'paid', paid), outcome);
    RETURN NEXT;
END;
$$;

-- Sets, keeps (a NULL `p_amount`) or removes (0) a product's bonus, for
-- wallet.upsert_product, and returns it (no row when it has none).
CREATE OR REPLACE FUNCTION wallet.set_product_bonus(
    p_product_id TEXT, p_product_currency TEXT, p_amount BIGINT, p_currency TEXT, p_expires_in_days INTEGER)
RETURNS SETOF wallet.product_bonuses
LANGUAGE plpgsql AS $$
BEGIN
    IF p_amount NOT BETWEEN 0 AND 1000000000000 THEN
        RAISE EXCEPTION 'bonus amount must be between 0 (no bonus) and 10^12, got %', p_amount USING ERRCODE = 'WL003';
    END IF;
    IF p_expires_in_days NOT BETWEEN 1 AND 3650 THEN
        RAISE EXCEPTION 'bonus expires_in_days must be between 1 and 3650, got %', p_expires_in_days
            USING ERRCODE = 'WL003';
    END IF;
    IF (p_currency IS NOT NULL OR p_expires_in_days IS NOT NULL) AND coalesce(p_amount, 0) = 0 THEN
        RAISE EXCEPTION 'a bonus currency or expiry needs a bonus amount above zero' USING ERRCODE = 'WL003';
    END IF;
    IF p_amount > 0 AND NOT EXISTS (SELECT FROM wallet.currencies c WHERE c.code = coalesce(p_currency, p_product_currency)) THEN
        RAISE EXCEPTION 'unknown currency %: add it first with Scripts/admin/currency.sql', p_currency
            USING ERRCODE = 'WL005';
    END IF;
    IF p_amount = 0 THEN
        DELETE FROM wallet.product_bonuses b WHERE b.product_id = p_product_id;
    ELSIF p_amount > 0 THEN
        INSERT INTO wallet.product_bonuses AS b (product_id, currency, amount, expires_in_days)
        VALUES (p_product_id, coalesce(p_currency, p_product_currency), p_amount, p_expires_in_days)
        ON CONFLICT ON CONSTRAINT product_bonuses_pkey DO UPDATE
            SET currency = EXCLUDED.currency, amount = EXCLUDED.amount, expires_in_days = EXCLUDED.expires_in_days,
                updated_at = now();
    END IF;
    RETURN QUERY SELECT * FROM wallet.product_bonuses b WHERE b.product_id = p_product_id;
END;
$$;

-- Sets (a JSON object of currency to amount, `{"gem": 50}`), keeps (NULL)
-- or removes (`{}`) a product's other lines, for wallet.upsert_product,
-- and returns them as such an object. A line is in another currency than
-- the product's own, one the catalog has, of 1 to 10^12 per unit.
CREATE OR REPLACE FUNCTION wallet.set_product_lines(p_product_id TEXT, p_product_currency TEXT, p_lines JSONB)
RETURNS JSONB
LANGUAGE plpgsql AS $$
DECLARE
    v_line RECORD;
BEGIN
    IF p_lines IS NOT NULL THEN
        IF jsonb_typeof(p_lines) <> 'object' THEN
            RAISE EXCEPTION 'lines must be a JSON object of currency to amount, such as {"gem": 50}' USING ERRCODE = 'WL003';
        END IF;
        FOR v_line IN SELECT l.key, l.value FROM jsonb_each(p_lines) l LOOP
            IF v_line.key = p_product_currency THEN
                RAISE EXCEPTION 'a line in % is the product''s own amount; give it as amount', v_line.key
                    USING ERRCODE = 'WL003';
            ELSIF jsonb_typeof(v_line.value) <> 'number' OR v_line.value::TEXT !~ '^[0-9]+$'
                  OR v_line.value::TEXT::NUMERIC NOT BETWEEN 1 AND 1000000000000 THEN
                RAISE EXCEPTION 'line % must be a whole amount between 1 and 10^12, got %', v_line.key, v_line.value
                    USING ERRCODE = 'WL003';
            ELSIF NOT EXISTS (SELECT FROM wallet.currencies c WHERE c.code = v_line.key) THEN
                RAISE EXCEPTION 'unknown currency %: add it first with Scripts/admin/currency.sql', v_line.key
                    USING ERRCODE = 'WL005';
            END IF;
        END LOOP;
        DELETE FROM wallet.product_lines l WHERE l.product_id = p_product_id AND NOT p_lines ? l.currency;
        INSERT INTO wallet.product_lines AS l (product_id, currency, amount)
        SELECT p_product_id, e.key, e.value::TEXT::BIGINT FROM jsonb_each(p_lines) e
        ON CONFLICT ON CONSTRAINT product_lines_pkey DO UPDATE
            SET amount = EXCLUDED.amount, updated_at = now() WHERE l.amount <> EXCLUDED.amount;
    END IF;
    IF EXISTS (SELECT FROM wallet.product_lines l WHERE l.product_id = p_product_id AND l.currency = p_product_currency) THEN
        RAISE EXCEPTION 'the product has a line in %; remove it (-v lines) before selling % as the product''s own',
            p_product_currency, p_product_currency USING ERRCODE = 'WL003';
    END IF;
    RETURN (SELECT coalesce(jsonb_object_agg(l.currency, l.amount), '{}') FROM wallet.product_lines l
            WHERE l.product_id = p_product_id);
END;
$$;

-- Adds or changes a catalog entry. Past credits keep their stored amount.
-- Without an operator, the audit names the database session user. A NULL
-- `p_active` keeps a product's current flag (a new product is active), so a
-- price change does not put a product that was taken off sale back on it.
-- A NULL `p_google_product_id` keeps the product's Google Play id; '' sets
-- it back to the product's own id.
--
-- A bonus adds free coins to each unit bought: `p_bonus_amount` of
-- `p_bonus_currency` (the product's own currency when NULL), expiring
-- `p_bonus_expires_in_days` after the credit (never, when NULL). A NULL
-- `p_bonus_amount` keeps the product's bonus as it is; 0 removes it.
--
-- Other lines (wallet.set_product_lines) sell more currencies with each
-- unit: `p_lines` `{"gem": 50}`; NULL keeps them, `{}` removes them.
--
-- A Google Play product id names one active product at most: a purchase of
-- it must buy one amount. A change that would leave the product active
-- under a Google Play id (its own id, when none is named) that another
-- active product already has raises WL009 and changes nothing; take the
-- other off sale, or name another id, first. Two changes that would both
-- take one id serialize on a lock of that id, so they cannot both pass.
-- (A database may hold such a pair from before this rule: its Google
-- credits are refused as product_mismatch until the catalog is mended.)
CREATE OR REPLACE FUNCTION wallet.upsert_product(
    p_product_id TEXT, p_amount BIGINT, p_currency TEXT, p_active BOOLEAN DEFAULT TRUE,
    p_operator TEXT DEFAULT NULL, p_reason TEXT DEFAULT NULL, p_google_product_id TEXT DEFAULT NULL,
    p_bonus_amount BIGINT DEFAULT NULL, p_bonus_currency TEXT DEFAULT NULL, p_bonus_expires_in_days INTEGER DEFAULT NULL,
    p_lines JSONB DEFAULT NULL)
RETURNS TABLE (outcome TEXT, product_id TEXT, currency TEXT, amount BIGINT, active BOOLEAN, google_product_id TEXT,
               bonus_amount BIGINT, bonus_currency TEXT, bonus_expires_in_days INTEGER, lines JSONB)
LANGUAGE plpgsql AS $$
DECLARE
    -- 'WLGP': wallet Google Play product id locks.
    c_namespace CONSTANT INTEGER := x'574C4750'::INTEGER;
    v_current  wallet.products;
    v_google   TEXT;
    v_taken_by TEXT;
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
    IF NOT EXISTS (SELECT FROM wallet.currencies c WHERE c.code = p_currency) THEN
        RAISE EXCEPTION 'unknown currency %: add it first with Scripts/admin/currency.sql', p_currency
            USING ERRCODE = 'WL005';
    END IF;
    IF p_google_product_id <> '' AND (length(p_google_product_id) > 128 OR p_google_product_id !~ '^[a-z0-9][a-z0-9._]*$') THEN
        RAISE EXCEPTION 'google_product_id must be 1-128 characters of [a-z0-9._], starting with a letter or digit'
            USING ERRCODE = 'WL003';
    END IF;
    SELECT * INTO v_current FROM wallet.products p WHERE p.product_id = p_product_id FOR UPDATE;
    v_google := coalesce(CASE WHEN p_google_product_id IS NULL THEN v_current.google_product_id
                              ELSE nullif(p_google_product_id, '') END, p_product_id);
    IF coalesce(p_active, v_current.active, TRUE) THEN
        PERFORM pg_advisory_xact_lock(c_namespace, hashtext(v_google));
        SELECT min(q.product_id) INTO v_taken_by FROM wallet.products q
        WHERE q.active AND q.product_id <> p_product_id AND coalesce(q.google_product_id, q.product_id) = v_google;
        IF v_taken_by IS NOT NULL THEN
            RAISE EXCEPTION 'Google Play product % already buys the active product %; take that one off sale or name another id',
                v_google, v_taken_by USING ERRCODE = 'WL009';
        END IF;
    END IF;
    INSERT INTO wallet.products AS p (product_id, currency, amount, active, google_product_id)
    VALUES (p_product_id, p_currency, p_amount, coalesce(p_active, TRUE), nullif(p_google_product_id, ''))
    ON CONFLICT ON CONSTRAINT products_pkey DO UPDATE
        SET currency = EXCLUDED.currency, amount = EXCLUDED.amount, active = coalesce(p_active, p.active),
            google_product_id = CASE WHEN p_google_product_id IS NULL THEN p.google_product_id
                                     ELSE nullif(p_google_product_id, '') END,
            updated_at = now()
    RETURNING p.product_id, p.currency, p.amount, p.active, coalesce(p.google_product_id, p.product_id)
    INTO product_id, currency, amount, active, google_product_id;
    SELECT b.amount, b.currency, b.expires_in_days INTO bonus_amount, bonus_currency, bonus_expires_in_days
    FROM wallet.set_product_bonus(p_product_id, p_currency, p_bonus_amount, p_bonus_currency, p_bonus_expires_in_days) b;
    lines := wallet.set_product_lines(p_product_id, p_currency, p_lines);
    outcome := CASE WHEN v_current.product_id IS NOT NULL THEN 'updated' ELSE 'created' END;
    INSERT INTO wallet.admin_audit (action, operator, reason, arguments, outcome)
    VALUES ('product', v_operator, p_reason,
            jsonb_build_object('product_id', p_product_id, 'amount', p_amount, 'currency', p_currency,
                               'active', active, 'google_product_id', google_product_id)
            || CASE WHEN p_bonus_amount IS NULL THEN '{}'::JSONB
                    ELSE jsonb_build_object('bonus_amount', p_bonus_amount, 'bonus_currency', bonus_currency,
                                            'bonus_expires_in_days', bonus_expires_in_days) END
            || CASE WHEN p_lines IS NULL THEN '{}'::JSONB ELSE jsonb_build_object('lines', lines) END,
            outcome);
    RETURN NEXT;
END;
$$;
