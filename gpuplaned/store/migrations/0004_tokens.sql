-- API tokens for the TCP endpoint (issue: API tokens; DESIGN "Security").
-- A token reads gpp_<ULID>_<secret>: the ULID is this row's id without its "tok_" prefix, and
-- only the hex SHA-256 of the secret part is kept. scopes is a JSON list of read, write,
-- agent, sdk, admin. Times are wall-clock ms; expires_at NULL: never.
-- A name is unique among tokens not revoked, so a revoked name can be given to its
-- replacement; revoked rows stay for the record.
CREATE TABLE api_tokens (
  id           TEXT PRIMARY KEY,
  name         TEXT NOT NULL,
  secret_hash  TEXT NOT NULL,
  scopes       TEXT NOT NULL,
  created_at   INTEGER NOT NULL,
  expires_at   INTEGER,
  last_used_at INTEGER,
  revoked_at   INTEGER
);
CREATE UNIQUE INDEX idx_api_tokens_active_name ON api_tokens(name) WHERE revoked_at IS NULL;
