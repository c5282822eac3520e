-- Who may write to a run over the network (issue 29 item 2). created_by: the credential that
-- created the run over the HTTP front (an api_tokens id, or a browser session's key); NULL for a
-- run made by the trusted Unix socket or by the scheduler (a job's run). sdk_cwd: the working
-- directory the SDK session that created the run declared; its checkpoint files must lie under it.
ALTER TABLE runs ADD COLUMN created_by TEXT;
ALTER TABLE runs ADD COLUMN sdk_cwd TEXT;
