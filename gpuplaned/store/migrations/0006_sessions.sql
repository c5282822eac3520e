-- SDK sessions: each init() in a training process opens one; many may report to one run
-- (DDP ranks, a resumed run). Batches are deduplicated per (session, seq) by the time-series
-- store's ts_batches; last_seq is what the daemon has acknowledged.
CREATE TABLE sessions (
  id          TEXT PRIMARY KEY,   -- UUIDv7
  run_id      TEXT NOT NULL REFERENCES runs(id),
  rank        INTEGER,
  host        TEXT,
  pid         INTEGER,
  status      TEXT NOT NULL,      -- OPEN, then how the process said it ended
  last_seq    INTEGER,
  points      INTEGER NOT NULL DEFAULT 0,
  created_at  INTEGER NOT NULL,
  finished_at INTEGER
);
CREATE INDEX idx_sessions_run ON sessions(run_id);
