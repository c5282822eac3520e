-- Issue 32: why a DISPATCHING job's node has not started it yet, in the node's words ("Slurm:
-- Resources"): set by the node's WAITING report, NULL once it runs and for a new attempt. Apart from
-- queue_reason, which is the scheduler's own while the job is QUEUED.
ALTER TABLE jobs ADD COLUMN wait_reason TEXT;
