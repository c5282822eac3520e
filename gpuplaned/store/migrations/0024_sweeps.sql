-- Issue 31 item 3: sweeps owned by the daemon. A sweep is a record the daemon keeps; each trial
-- is an ordinary job made from the sweep's template and the trial's values (name -> value).
-- gpuplaned.domain.sweeps expands the parameters; gpuplaned.store.sweep_rows holds the SQL.
CREATE TABLE sweeps (
  id            TEXT PRIMARY KEY,              -- swp_<ULID>
  name          TEXT NOT NULL,                 -- trials are named "<name>-<trial>"
  kind          TEXT NOT NULL,                 -- grid | random | list
  template      TEXT NOT NULL,                 -- JSON: the JobSubmit body every trial is made from
  parameters    TEXT NOT NULL,                 -- JSON: the spec as submitted (grid / random+trials+seed / list)
  metric        TEXT,                          -- the primary metric; NULL: none named (no best shown)
  goal          TEXT NOT NULL DEFAULT 'min',   -- min | max
  max_parallel  INTEGER,                       -- NULL: no throttle (Slurm's %K)
  paused        INTEGER NOT NULL DEFAULT 0,
  pause_reason  TEXT,                          -- "paused by user", "3 trials failed within their first minute"
  early_stop    TEXT,                          -- JSON {"rule", "min_steps", "grace_s"} or NULL
  retry_on      TEXT,                          -- JSON {"causes", "times"} or NULL
  experiment_id TEXT REFERENCES experiments(id),
  token_id      TEXT,                          -- who submitted it: a limited token sees and acts on its own only
  created_at    INTEGER NOT NULL,
  cancelled_at  INTEGER
);
CREATE INDEX idx_sweeps_name ON sweeps(name);
-- The sweeps that hold trials back, read by every scheduling pass (gpuplaned.store.sweep_rows.holds).
CREATE INDEX idx_sweeps_holding ON sweeps(id) WHERE cancelled_at IS NULL AND (paused = 1 OR max_parallel IS NOT NULL);
ALTER TABLE jobs ADD COLUMN sweep_id TEXT REFERENCES sweeps(id);
ALTER TABLE jobs ADD COLUMN sweep_trial INTEGER;   -- 0, 1, 2 ... within its sweep
ALTER TABLE jobs ADD COLUMN sweep_values TEXT;     -- JSON name -> value, canonical (sorted keys, no spaces)
CREATE UNIQUE INDEX idx_jobs_sweep_values ON jobs(sweep_id, sweep_values) WHERE sweep_id IS NOT NULL;
