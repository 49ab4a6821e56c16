-- Hold operations are decided a batch at a time (wallet.hold_many in
-- Migrations/functions/07_holds.sql, set-based as wallet.debit_many): the
-- functions that placed, captured or released one hold each, with their
-- own wallet lock, expiry and stored key, are no longer called.
DROP FUNCTION IF EXISTS wallet.place_hold(wallet.hold_request);
DROP FUNCTION IF EXISTS wallet.capture_hold(wallet.hold_request);
DROP FUNCTION IF EXISTS wallet.release_hold(wallet.hold_request);
DROP FUNCTION IF EXISTS wallet.hold_to_settle(wallet.hold_request);
DROP FUNCTION IF EXISTS wallet.lock_hold(BIGINT, TEXT, BOOLEAN);
DROP FUNCTION IF EXISTS wallet.lock_hold_wallet(TEXT, TEXT);
DROP FUNCTION IF EXISTS wallet.unhold(wallet.holds);
DROP FUNCTION IF EXISTS wallet.store_hold_answer(wallet.hold_request, wallet.hold_result, BIGINT);
