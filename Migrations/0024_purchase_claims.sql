-- An unclaimed purchase credited by hand after a support check
-- (Scripts/admin/claim.sql, wallet.claim_purchase) is audited as a claim.
ALTER TABLE wallet.admin_audit DROP CONSTRAINT admin_audit_action_check;
ALTER TABLE wallet.admin_audit ADD CONSTRAINT admin_audit_action_check
    CHECK (action IN ('refund', 'grant', 'revoke', 'product', 'release_hold', 'revoke_key',
                      'webhook_add', 'webhook_disable', 'webhook_enable', 'claim'));
