-- Schema of seed 000 section 4.2: the logical model every later migration builds on.
-- Times are milliseconds since the epoch; JSON columns hold text.

CREATE TABLE projects (
  id          TEXT PRIMARY KEY,
  name        TEXT NOT NULL UNIQUE,
  description TEXT,
  created_at  INTEGER NOT NULL
);

CREATE TABLE experiments (
  id          TEXT PRIMARY KEY,
  project_id  TEXT NOT NULL REFERENCES projects(id),
  name        TEXT NOT NULL,
  description TEXT,
  created_at  INTEGER NOT NULL,
  UNIQUE (project_id, name)
);

CREATE TABLE nodes (
  id                TEXT PRIMARY KEY,
  name              TEXT NOT NULL UNIQUE,
  status            TEXT NOT NULL,
  agent_version     TEXT,
  labels            TEXT,
  hardware          TEXT,
  last_heartbeat_at INTEGER,
  created_at        INTEGER NOT NULL
);

CREATE TABLE jobs (
  id               TEXT PRIMARY KEY,
  name             TEXT NOT NULL,
  type             TEXT NOT NULL,
  status           TEXT NOT NULL,
  priority         INTEGER NOT NULL DEFAULT 0,
  runner           TEXT NOT NULL DEFAULT 'process',
  working_dir      TEXT,
  command          TEXT NOT NULL,
  env              TEXT,
  resources        TEXT NOT NULL DEFAULT '{"gpu":1}',
  node_selector    TEXT,
  attempt          INTEGER NOT NULL DEFAULT 0,
  max_attempts     INTEGER NOT NULL DEFAULT 1,
  project_id       TEXT REFERENCES projects(id),
  experiment_id    TEXT REFERENCES experiments(id),
  node_id          TEXT REFERENCES nodes(id),
  created_at       INTEGER NOT NULL,
  started_at       INTEGER,
  finished_at      INTEGER,
  exit_code        INTEGER,
  failure_reason   TEXT,
  cancel_requested INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX idx_jobs_queue ON jobs(status, priority DESC, created_at);

-- One scheduling slot per physical GPU; owner_job_id NULL means free.
CREATE TABLE gpu_slots (
  id           TEXT PRIMARY KEY,
  node_id      TEXT NOT NULL REFERENCES nodes(id),
  gpu_index    INTEGER NOT NULL,
  model        TEXT,
  vram_mb      INTEGER,
  owner_job_id TEXT REFERENCES jobs(id),
  UNIQUE (node_id, gpu_index)
);

CREATE TABLE runs (
  id            TEXT PRIMARY KEY,
  job_id        TEXT REFERENCES jobs(id),
  attempt       INTEGER,
  node_id       TEXT,
  project_id    TEXT REFERENCES projects(id),
  experiment_id TEXT REFERENCES experiments(id),
  name          TEXT,
  source        TEXT NOT NULL,
  status        TEXT NOT NULL,
  config        TEXT,
  env_snapshot  TEXT,
  created_at    INTEGER NOT NULL,
  started_at    INTEGER,
  finished_at   INTEGER,
  summary       TEXT
);
CREATE INDEX idx_runs_exp ON runs(experiment_id, created_at DESC);

CREATE TABLE metric_definitions (
  name         TEXT PRIMARY KEY,
  display_name TEXT,
  direction    TEXT,
  scope        TEXT,
  is_primary   INTEGER NOT NULL DEFAULT 0,
  unit         TEXT,
  created_at   INTEGER NOT NULL
);

CREATE TABLE project_primary_metrics (
  project_id  TEXT PRIMARY KEY REFERENCES projects(id) ON DELETE CASCADE,
  metric_name TEXT NOT NULL REFERENCES metric_definitions(name) ON DELETE CASCADE,
  created_at  INTEGER NOT NULL
);

CREATE TABLE experiment_primary_metrics (
  experiment_id TEXT PRIMARY KEY REFERENCES experiments(id) ON DELETE CASCADE,
  metric_name   TEXT NOT NULL REFERENCES metric_definitions(name) ON DELETE CASCADE,
  created_at    INTEGER NOT NULL
);

CREATE TABLE metrics_raw (
  run_id TEXT NOT NULL REFERENCES runs(id),
  ts     INTEGER NOT NULL,
  step   INTEGER,
  name   TEXT NOT NULL,
  value  REAL NOT NULL
);
CREATE INDEX idx_metrics_raw ON metrics_raw(run_id, name, ts);

CREATE TABLE metrics_rollup (
  run_id      TEXT NOT NULL,
  name        TEXT NOT NULL,
  granularity TEXT NOT NULL,
  bucket_ts   INTEGER NOT NULL,
  min REAL, max REAL, avg REAL, last REAL, cnt INTEGER,
  PRIMARY KEY (run_id, name, granularity, bucket_ts)
);

CREATE TABLE node_metrics_raw (
  node_id TEXT NOT NULL,
  ts      INTEGER NOT NULL,
  name    TEXT NOT NULL,
  value   REAL NOT NULL
);
CREATE INDEX idx_node_metrics ON node_metrics_raw(node_id, name, ts);

CREATE TABLE node_metrics_rollup (
  node_id     TEXT NOT NULL,
  name        TEXT NOT NULL,
  granularity TEXT NOT NULL,
  bucket_ts   INTEGER NOT NULL,
  min REAL, max REAL, avg REAL, last REAL, cnt INTEGER,
  PRIMARY KEY (node_id, name, granularity, bucket_ts)
);

CREATE TABLE events (
  id       TEXT PRIMARY KEY,
  ts       INTEGER NOT NULL,
  type     TEXT NOT NULL,
  severity TEXT NOT NULL,
  run_id   TEXT,
  job_id   TEXT,
  node_id  TEXT,
  step     INTEGER,
  message  TEXT,
  context  TEXT
);
CREATE INDEX idx_events_run ON events(run_id, ts);
CREATE INDEX idx_events_type ON events(type, ts);

CREATE TABLE checkpoints (
  id          TEXT PRIMARY KEY,
  run_id      TEXT NOT NULL REFERENCES runs(id),
  step        INTEGER,
  epoch       REAL,
  path        TEXT NOT NULL,
  size_bytes  INTEGER,
  fingerprint TEXT,
  parent_id   TEXT REFERENCES checkpoints(id),
  metadata    TEXT,
  created_at  INTEGER NOT NULL,
  UNIQUE (run_id, path)
);

CREATE TABLE evaluations (
  id              TEXT PRIMARY KEY,
  checkpoint_id   TEXT NOT NULL REFERENCES checkpoints(id),
  job_id          TEXT REFERENCES jobs(id),
  run_id          TEXT REFERENCES runs(id),
  suite           TEXT,
  dataset         TEXT,
  dataset_version TEXT,
  metrics         TEXT NOT NULL,
  status          TEXT NOT NULL,
  runtime_s       REAL,
  created_at      INTEGER NOT NULL
);

CREATE TABLE artifacts (
  id         TEXT PRIMARY KEY,
  run_id     TEXT NOT NULL,
  kind       TEXT,
  path       TEXT NOT NULL,
  metadata   TEXT,
  created_at INTEGER NOT NULL
);

CREATE TABLE webhook_subscriptions (
  id          TEXT PRIMARY KEY,
  url         TEXT NOT NULL,
  event_types TEXT NOT NULL,
  secret      TEXT,
  enabled     INTEGER NOT NULL DEFAULT 1,
  created_at  INTEGER NOT NULL
);
