-- Issue 31 item 2: job groups and queue control (pueue-style). A group has its own parallel limit
-- (NULL: none) and may be paused; a job names its group (NULL: the default group, which has no
-- limit and is paused only with the whole queue). gpuplaned.domain.queue decides what they hold.
CREATE TABLE job_groups (
  name TEXT PRIMARY KEY,
  parallel INTEGER,
  paused INTEGER NOT NULL DEFAULT 0
) WITHOUT ROWID;
ALTER TABLE jobs ADD COLUMN group_name TEXT;
CREATE INDEX idx_jobs_group ON jobs(group_name, status);
-- The whole queue's pause (gpuplanectl queue pause): one row, so it survives a daemon restart.
CREATE TABLE queue_control (
  id INTEGER PRIMARY KEY CHECK (id = 1),
  paused INTEGER NOT NULL DEFAULT 0
);
INSERT INTO queue_control (id, paused) VALUES (1, 0);
