-- Browser sessions of the web UI (issue 7): a signed-in browser holds a random cookie value;
-- only its hex SHA-256 is kept here, never the value. A session made from an API token
-- (POST /api/v1/auth/login) carries that token's scopes and token_id, and ends no later than
-- the token; one made from a `gpuplanectl ui` login link has no token_id. Times are
-- wall-clock ms.
CREATE TABLE ui_sessions (
  id_hash     TEXT PRIMARY KEY,
  origin      TEXT NOT NULL,      -- token or link: how the browser signed in
  token_id    TEXT,               -- the API token it came from (origin token)
  scopes      TEXT NOT NULL,      -- a JSON list, as api_tokens.scopes
  created_at  INTEGER NOT NULL,
  expires_at  INTEGER NOT NULL
);
CREATE INDEX idx_ui_sessions_token ON ui_sessions(token_id) WHERE token_id IS NOT NULL;
CREATE INDEX idx_ui_sessions_expires ON ui_sessions(expires_at);

-- Revoking a token signs out every browser that signed in with it, in the revoking
-- transaction itself, whoever revokes it.
CREATE TRIGGER ui_sessions_end_with_their_token
AFTER UPDATE OF revoked_at ON api_tokens
WHEN NEW.revoked_at IS NOT NULL
BEGIN
  DELETE FROM ui_sessions WHERE token_id = NEW.id;
END;
