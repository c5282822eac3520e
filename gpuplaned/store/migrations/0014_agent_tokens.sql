-- Capability tokens for agents, and the audit log (issue 17).

-- A token's limits (gpuplaned.protocol.token_limits.TokenLimits as JSON; NULL: none), and which
-- token submitted a job (NULL: the local socket, a cookie, or before this migration), so a
-- token's queued jobs and GPU-hours can be counted.
ALTER TABLE api_tokens ADD COLUMN limits TEXT;
ALTER TABLE jobs ADD COLUMN token_id TEXT;
CREATE INDEX idx_jobs_token ON jobs(token_id, status) WHERE token_id IS NOT NULL;

-- One row per REST write (either front) and per MCP tool call, after it was answered.
-- arguments is JSON with secrets already redacted (gpuplaned.service.audit.redact); outcome is
-- "ok" or the error code. caller_kind: token, cookie or local. Rows older than
-- gpuplaned.service.audit.KEEP_DAYS are dropped by the policies actor's pass.
CREATE TABLE audit_log (
  id          INTEGER PRIMARY KEY,
  ts          INTEGER NOT NULL,
  caller_kind TEXT NOT NULL,
  token_id    TEXT,
  token_name  TEXT,
  via         TEXT NOT NULL,
  action      TEXT NOT NULL,
  arguments   TEXT NOT NULL,
  outcome     TEXT NOT NULL,
  detail      TEXT
);
CREATE INDEX idx_audit_log_ts ON audit_log(ts);
CREATE INDEX idx_audit_log_token ON audit_log(token_name, id);
