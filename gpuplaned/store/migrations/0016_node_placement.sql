-- Scheduling across nodes (issue 18): drained nodes, and why a queued job waits.

-- `gpuplanectl node drain`: 1 while the node gets no new jobs (its running ones go on); kept
-- across restarts and hellos until `node undrain`.
ALTER TABLE nodes ADD COLUMN drained INTEGER NOT NULL DEFAULT 0;

-- Why a QUEUED job waits when no node can take it whatever frees up (no node has its GPU
-- model, every node that could run it is drained...), in words; NULL: it waits for capacity
-- only, or has not been looked at yet. Written by the scheduler's pass
-- (gpuplaned.domain.scheduling.waiting_reason). A job's GPU constraints and placement are
-- in its resources JSON (gpu_model, min_gpu_memory_mb, placement).
ALTER TABLE jobs ADD COLUMN queue_reason TEXT;
