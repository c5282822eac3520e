-- Issue 31: the runs list (the UI's Runs page, `gpuplanectl runs`, list_runs over MCP) reads
-- newest first, a page at a time. Without an index in that order it read every run, with
-- four correlated lookups each (project, experiment, its sessions' points, its series), and
-- sorted them to keep 50: 40 ms a page at 20,000 runs, and growing with every sweep's trials.
-- With it, a page reads its own rows. A run's created_at never changes: one more index entry
-- a run, written once.
CREATE INDEX idx_runs_created ON runs(created_at DESC, id DESC);
