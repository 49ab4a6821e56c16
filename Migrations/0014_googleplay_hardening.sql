-- Google Play voids as Google documents them: what the service takes from
-- Google, the ledger can store.

-- A quantity-based partial refund's voidedQuantity is whatever Google
-- voided: at least 1, with no upper bound of ours. The bound of 10 was the
-- credit's, and a void of a purchase the wallet never credited (one of more
-- than 10 units, say) must still be recorded, not refused by this check:
-- refused, it failed every sweep that met it. The refund itself never
-- exceeds the credit's quantity (wallet.apply_googleplay_voids).
ALTER TABLE wallet.googleplay_voids DROP CONSTRAINT googleplay_voids_voided_quantity_check;
ALTER TABLE wallet.googleplay_voids ADD CONSTRAINT googleplay_voids_voided_quantity_check
    CHECK (voided_quantity >= 1);

-- A Google Play product id names one active product at most. That is
-- enforced by wallet.upsert_product (WL009, Migrations/functions/10_upsert_product.sql),
-- not by a unique index here: a database may already hold two active
-- products that share one, and this upgrade must not fail on it. A Google
-- credit of such a product is refused (reason product_mismatch) until the
-- catalog names each product once; this lists them for the operator:
--   SELECT coalesce(google_product_id, product_id) AS google_product_id,
--          array_agg(product_id ORDER BY product_id) AS products
--   FROM wallet.products WHERE active GROUP BY 1 HAVING count(*) > 1;
