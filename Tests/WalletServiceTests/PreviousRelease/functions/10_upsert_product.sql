-- wallet.upsert_product, re-applied by the migrator whenever this file
-- changes (first defined in 0003_admin_and_invariants.sql; the Google Play
-- product id since 0012, which dropped the six-argument form).

-- Adds or changes a catalog entry. Past credits keep their stored amount.
-- Without an operator, the audit names the database session user. A NULL
-- `p_active` keeps a product's current flag (a new one is active), so a
-- price change does not put a product that was taken off sale back on it.
-- A NULL `p_google_product_id` keeps the product's Google Play id; '' sets
-- it back to the product's own id.
CREATE OR REPLACE FUNCTION wallet.upsert_product(
    p_product_id TEXT, p_amount BIGINT, p_currency TEXT, p_active BOOLEAN DEFAULT TRUE,
    p_operator TEXT DEFAULT NULL, p_reason TEXT DEFAULT NULL, p_google_product_id TEXT DEFAULT NULL)
RETURNS TABLE (outcome TEXT, product_id TEXT, currency TEXT, amount BIGINT, active BOOLEAN, google_product_id TEXT)
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
    IF p_google_product_id <> '' AND (length(p_google_product_id) > 128 OR p_google_product_id !~ '^[a-z0-9][a-z0-9._]*$') THEN
        RAISE EXCEPTION 'google_product_id must be 1-128 characters of [a-z0-9._], starting with a letter or digit'
            USING ERRCODE = 'WL003';
    END IF;
    SELECT TRUE INTO v_existed FROM wallet.products p WHERE p.product_id = p_product_id FOR UPDATE;
    INSERT INTO wallet.products AS p (product_id, currency, amount, active, google_product_id)
    VALUES (p_product_id, p_currency, p_amount, coalesce(p_active, TRUE), nullif(p_google_product_id, ''))
    ON CONFLICT ON CONSTRAINT products_pkey DO UPDATE
        SET currency = EXCLUDED.currency, amount = EXCLUDED.amount, active = coalesce(p_active, p.active),
            google_product_id = CASE WHEN p_google_product_id IS NULL THEN p.google_product_id
                                     ELSE nullif(p_google_product_id, '') END,
            updated_at = now()
    RETURNING p.product_id, p.currency, p.amount, p.active, coalesce(p.google_product_id, p.product_id)
    INTO product_id, currency, amount, active, google_product_id;
    outcome := CASE WHEN v_existed THEN 'updated' ELSE 'created' END;
    INSERT INTO wallet.admin_audit (action, operator, reason, arguments, outcome)
    VALUES ('product', v_operator, p_reason,
            jsonb_build_object('product_id', p_product_id, 'amount', p_amount, 'currency', p_currency,
                               'active', active, 'google_product_id', google_product_id),
            outcome);
    RETURN NEXT;
END;
$$;
