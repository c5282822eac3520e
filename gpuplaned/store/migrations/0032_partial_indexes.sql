-- Issue 31 item 8: a job's change of state writes fewer pages. Every index a row is in takes a
-- page of the write-ahead log in each transaction that changes an indexed column of that row. A
-- job's group and a run's project and experiment are NULL for most rows (a job submitted with no
-- group; a job's run outside a sweep), and nothing looks rows up by their NULL through these
-- indexes: each lookup is by a name or an id (`group_name = ?`, `IN (...)`, a join on the id),
-- which SQLite knows excludes NULL, so it reads the same index, now of the rows that have one.
--
-- Measured on a copy of a drained daemon's database, the three write transactions of a job
-- (dispatch, RUNNING, end) replayed 1,000 times: 15.5 pages a job before, 11.5 after, and the
-- SQL's CPU a job ~290 us -> ~220 us.
DROP INDEX idx_jobs_group;
CREATE INDEX idx_jobs_group ON jobs(group_name, status) WHERE group_name IS NOT NULL;
DROP INDEX idx_runs_exp;
CREATE INDEX idx_runs_exp ON runs(experiment_id, created_at DESC) WHERE experiment_id IS NOT NULL;
DROP INDEX idx_runs_project;
CREATE INDEX idx_runs_project ON runs(project_id, created_at DESC) WHERE project_id IS NOT NULL;
