-- Jobs as the scheduler and runner need them (issue: jobs, slots, runner, logs).
-- jobs.command holds the argv as a JSON array; jobs.resources is {"gpu": N};
-- jobs.node_selector is {"labels": [...], "node": name-or-null}.
ALTER TABLE jobs ADD COLUMN timeout_s REAL;
ALTER TABLE jobs ADD COLUMN stop_grace_s REAL NOT NULL DEFAULT 10;
ALTER TABLE jobs ADD COLUMN run_id TEXT;
ALTER TABLE jobs ADD COLUMN gpu_indexes TEXT;
ALTER TABLE nodes ADD COLUMN max_cpu_jobs INTEGER NOT NULL DEFAULT 2;
ALTER TABLE runs ADD COLUMN exit_code INTEGER;
ALTER TABLE runs ADD COLUMN failure_reason TEXT;
CREATE INDEX idx_jobs_created ON jobs(created_at DESC, id DESC);
CREATE INDEX idx_jobs_node_status ON jobs(node_id, status);
CREATE INDEX idx_gpu_slots_owner ON gpu_slots(owner_job_id);

-- The last lines of each job's output, for quick access; the full logs stay in files.
-- offset is the byte offset of the line in its file: a stable identity for resume.
CREATE TABLE job_logs (
  job_id  TEXT NOT NULL,
  attempt INTEGER NOT NULL,
  stream  TEXT NOT NULL,
  offset  INTEGER NOT NULL,
  line    TEXT NOT NULL,
  PRIMARY KEY (job_id, attempt, stream, offset)
) WITHOUT ROWID;
