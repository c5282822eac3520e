-- Issue 31 item 2: the folders of removed jobs still to delete (job remove, clean), one row per
-- job and host: node_id '' is this daemon's own home, else the remote agent's node that ran one of
-- its attempts. Written in the removal's own transaction and deleted once the host has done it, so
-- neither a crash after the commit nor an agent away at the time leaves a folder behind.
CREATE TABLE folder_removals (
  job_id     TEXT NOT NULL,
  node_id    TEXT NOT NULL DEFAULT '',
  keep       TEXT NOT NULL DEFAULT '[]',  -- JSON: the job's registered checkpoints (a folder holding one stays)
  created_at INTEGER NOT NULL,
  PRIMARY KEY (node_id, job_id)
) WITHOUT ROWID;
