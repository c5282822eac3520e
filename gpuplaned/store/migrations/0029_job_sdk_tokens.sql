-- Issue 32 item 5: the SDK inside a Slurm allocation reaches the daemon over TCP with a token of
-- its own job (gpuplaned.service.api.job_tokens).

-- The job whose SDK a token is (NULL: a token a user made). Minted at the job's dispatch, held to
-- that job's runs, revoked in the transaction that records the attempt's end.
ALTER TABLE api_tokens ADD COLUMN job_id TEXT;
CREATE INDEX idx_api_tokens_job ON api_tokens(job_id) WHERE job_id IS NOT NULL AND revoked_at IS NULL;

-- The URL a node's jobs reach this daemon's HTTP front by (its hello's sdk_server: a Slurm node's
-- [slurm] server_url); NULL: its jobs use the control socket.
ALTER TABLE nodes ADD COLUMN sdk_server TEXT;
