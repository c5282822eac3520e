-- A checkpoint's full hash (issue 15, `gpuplanectl ckpt verify`): sha256 of every byte, taken
-- the first time the checkpoint is verified and found unchanged since its registration, and
-- when. A later verify compares against it, which sees what the fingerprint's first and last
-- MiB cannot.
ALTER TABLE checkpoints ADD COLUMN full_hash TEXT;
ALTER TABLE checkpoints ADD COLUMN verified_at INTEGER;
