-- Issue 29 item 4: a remote node's name belongs to the agent token that first said hello as it
-- (gpuplaned.service.agent_link), and to no other until `gpuplanectl node forget` deletes the row.
-- NULL: the node is this daemon's own, or was registered before this column (the next agent
-- token to say hello as it is bound then), or over the trusted Unix socket.
ALTER TABLE nodes ADD COLUMN agent_token_id TEXT;

-- Issue 29 item 5: every record from a node names a job attempt or run that is on that node
-- (gpuplaned.store.node_rows.foreign_attempts); a job's runs are looked up by job and attempt.
CREATE INDEX idx_runs_job_attempt ON runs(job_id, attempt);
