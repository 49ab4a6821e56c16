-- A player's holds, newest first (GET /v1/wallets/{user_id}/holds): the
-- only index on holds by player covered the active ones. One more B-tree
-- entry per hold placed.
CREATE INDEX holds_user ON wallet.holds (user_id, id);
