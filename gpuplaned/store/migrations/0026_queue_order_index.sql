-- Issue 31 item 8: the queue read in its whole order (gpuplaned.domain.queue.ORDER: priority,
-- then submit time, then id) from the index alone. Without id in it, jobs submitted together
-- (a batch's, a sweep's trials: one created_at) were sorted again on every scheduling pass,
-- which read every job of that group before the first (a pass per submit and per job end).
DROP INDEX idx_jobs_queue;
CREATE INDEX idx_jobs_queue ON jobs(status, priority DESC, created_at, id);
