-- Issue 31: the lists read a page of their own rows, not the whole table. Found with a SQLite
-- trace of a daemon running a 400-trial sweep, every statement's plan then read for a scan of a
-- table that grows with each job.
--
-- The runs list (the UI's Runs page, `gpuplanectl runs`, list_runs over MCP) reads newest first.
-- Without an index in that order it read every run, with four correlated lookups each (project,
-- experiment, its sessions' points, its series), and sorted them to keep 50: 40 ms a page at
-- 20,000 runs. A run's created_at never changes: one more index entry a run, written once.
CREATE INDEX idx_runs_created ON runs(created_at DESC, id DESC);

-- A job's events (its page, `gpuplanectl job show`, the events list filtered by job) and the
-- warnings and errors (the events list filtered by severity), newest first: each read every
-- event there is, 6 ms at 20,000 events (two a run: RUN_STARTED, RUN_FINISHED). An index entry
-- carries its rowid, so each reads in the list's order.
CREATE INDEX idx_events_job ON events(job_id);
CREATE INDEX idx_events_severity ON events(severity);
