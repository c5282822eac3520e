-- Checkpoint lineage, retention, evaluations, resume and import (issue 15).
-- jobs.policies: the job's per-job policies as JSON ({"retention": {"keep_best": K,
-- "keep_last": K}, "evaluate": {"every": "best"|"each", "command": [...]}}), NULL for none.
ALTER TABLE jobs ADD COLUMN policies TEXT;
-- jobs.resume_from: the checkpoint the job's next attempt resumes from (`job retry
-- --resume-from`); runs.resumed_from / resume_step: the one a run's attempt did resume from,
-- and its step: the first link of the run's checkpoints' parent_id chain.
ALTER TABLE jobs ADD COLUMN resume_from TEXT REFERENCES checkpoints(id);
ALTER TABLE runs ADD COLUMN resumed_from TEXT REFERENCES checkpoints(id);
ALTER TABLE runs ADD COLUMN resume_step INTEGER;
-- A checkpoint row is marked deleted (retention) only after its file is gone.
ALTER TABLE checkpoints ADD COLUMN deleted_at INTEGER;
-- An imported run's key (`gpuplanectl import-run DIR`): re-importing the same dir adds nothing twice.
ALTER TABLE runs ADD COLUMN import_key TEXT;
CREATE UNIQUE INDEX idx_runs_import_key ON runs(import_key) WHERE import_key IS NOT NULL;
-- Evaluations (H3): a name, when the job started and ended, and why one failed, in words;
-- found by job (its end, the SDK's log_evaluation) and by checkpoint (the lists).
ALTER TABLE evaluations ADD COLUMN name TEXT;
ALTER TABLE evaluations ADD COLUMN started_at INTEGER;
ALTER TABLE evaluations ADD COLUMN finished_at INTEGER;
ALTER TABLE evaluations ADD COLUMN error TEXT;
CREATE INDEX idx_evaluations_job ON evaluations(job_id);
CREATE INDEX idx_evaluations_checkpoint ON evaluations(checkpoint_id, created_at);
-- Who registered a file already (a watcher find in a folder two jobs share; retention's in-use check).
CREATE INDEX idx_checkpoints_path ON checkpoints(path);
-- Which source feeds each of a run's series (service/series_owner.py): a script that logs with
-- the SDK and also writes TensorBoard events of the same tags is stored once, from the SDK.
CREATE TABLE run_series_sources (
  run_id TEXT NOT NULL,
  name   TEXT NOT NULL,
  source TEXT NOT NULL CHECK (source IN ('sdk', 'tensorboard')),
  PRIMARY KEY (run_id, name)
) WITHOUT ROWID;
