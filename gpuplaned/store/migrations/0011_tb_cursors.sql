-- Where the TensorBoard tailer (actors/tbtail.py, issue 15) stands in each event file of a
-- job's attempt: the file's inode and the byte offset after the last record whose points were
-- committed, written in the same transaction as those points, so a restart of the daemon
-- mid-file resumes after them and stores nothing twice. state is the rewind bookkeeping
-- (gpuplaned/tensorboard/rewind.py) as JSON. reads counts the reads stored for the file: it
-- names each read's points in ts_batches, so a file read again from its start (truncated and
-- written anew under the same inode) is never taken for a batch stored before.
CREATE TABLE tb_cursors (
  job_id     TEXT NOT NULL,
  attempt    INTEGER NOT NULL,
  path       TEXT NOT NULL,
  inode      INTEGER NOT NULL,
  offset     INTEGER NOT NULL,
  state      TEXT,
  reads      INTEGER NOT NULL DEFAULT 0,
  updated_at INTEGER NOT NULL,
  PRIMARY KEY (job_id, attempt, path)
) WITHOUT ROWID;
-- How many points of the run came from TensorBoard event files (the tailer, import-run): with
-- the SDK sessions' points, the run's metric_sources.
ALTER TABLE runs ADD COLUMN tb_points INTEGER NOT NULL DEFAULT 0;
