-- POSTs carrying an Idempotency-Key: the first request's result, replayed for a repeat.
CREATE TABLE idempotency_keys (
  scope      TEXT NOT NULL,     -- who and where: "<token id or local> <METHOD> <path>"
  key        TEXT NOT NULL,
  body_hash  TEXT NOT NULL,     -- sha256 of the request body: a different body is a conflict
  status     INTEGER,           -- NULL while the first request is still being answered
  response   BLOB,
  created_at INTEGER NOT NULL,
  PRIMARY KEY (scope, key)
);
CREATE INDEX idx_idempotency_created ON idempotency_keys(created_at);
