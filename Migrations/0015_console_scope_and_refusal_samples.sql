-- The console scope: a key for support agents that signs in to /admin and
-- opens no /v1 route.
ALTER TABLE wallet.api_keys DROP CONSTRAINT api_keys_scopes_check;
ALTER TABLE wallet.api_keys ADD CONSTRAINT api_keys_scopes_check
    CHECK (cardinality(scopes) > 0 AND scopes <@ ARRAY['credit', 'debit', 'read', 'console', 'admin']);
