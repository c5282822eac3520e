-- Issue 32: a node that hands its jobs to Slurm. Its runner ("local" | "slurm"), and for a pooled
-- node (Slurm places the GPUs itself) the most GPUs one job may ask of it and how many of our jobs
-- it may hold at once; NULL for a local node, whose GPUs are its gpu_slots rows. Set by each hello.
ALTER TABLE nodes ADD COLUMN runner TEXT NOT NULL DEFAULT 'local';
ALTER TABLE nodes ADD COLUMN pooled_gpus_per_job INTEGER;
ALTER TABLE nodes ADD COLUMN pooled_max_jobs INTEGER;
