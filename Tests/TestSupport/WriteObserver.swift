/// Which settings each write to the ledger ran with, for tests that check
/// writes commit with synchronous_commit on whatever the database says.
public enum WriteObserver {
    /// A statement trigger on every table of schema `wallet` that notes the
    /// writing transaction's settings. Test-only: it lives in the test's
    /// database, never in the product's schema.
    public static let sql = """
        CREATE TABLE public.observed_writes (
            table_name TEXT NOT NULL, synchronous_commit TEXT NOT NULL, lock_timeout TEXT NOT NULL,
            statement_timeout TEXT NOT NULL);
        CREATE FUNCTION public.observe_write() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            INSERT INTO public.observed_writes VALUES (TG_TABLE_NAME, current_setting('synchronous_commit'),
                current_setting('lock_timeout'), current_setting('statement_timeout'));
            RETURN NULL;
        END $$;
        DO $$
        DECLARE t RECORD;
        BEGIN
            FOR t IN SELECT tablename FROM pg_tables WHERE schemaname = 'wallet' LOOP
                EXECUTE format('CREATE TRIGGER zz_observe_write AFTER INSERT OR UPDATE OR DELETE ON wallet.%I '
                    'FOR EACH STATEMENT EXECUTE FUNCTION public.observe_write()', t.tablename);
            END LOOP;
        END $$;
        """
}
