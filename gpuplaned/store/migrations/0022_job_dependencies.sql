-- Issue 31 item 1: job dependencies (submit --after, --after-any, --after-failed). One row per
-- edge: job_id waits for depends_on under condition (succeeded, ended or failed; every edge of
-- one job has the same). gpuplaned.domain.dependencies decides whether they are met.
CREATE TABLE job_dependencies (
  job_id TEXT NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,
  depends_on TEXT NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,
  condition TEXT NOT NULL,
  PRIMARY KEY (job_id, depends_on)
) WITHOUT ROWID;
CREATE INDEX idx_job_dependencies_on ON job_dependencies(depends_on);
-- 1 while a queued job waits for a dependency: the scheduler's queue read skips it.
ALTER TABLE jobs ADD COLUMN dependencies_pending INTEGER NOT NULL DEFAULT 0;
