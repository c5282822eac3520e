// Cancel and retry, each behind a confirmation that says what will happen.

import { useState } from "react";
import { api } from "../api/client";
import type { Job } from "../api/types";
import { CANCELLABLE, RETRYABLE } from "../lib/jobStates";
import { ConfirmDialog } from "./Dialog";
import { Icon } from "./Icon";

export function JobActions({ job, onChange, compact }: { job: Job; onChange: (job: Job) => void; compact?: boolean }) {
  const [confirm, setConfirm] = useState<"cancel" | "retry" | null>(null);
  const canCancel = CANCELLABLE.has(job.status) && !job.cancel_requested;
  const canRetry = RETRYABLE.has(job.status);
  const stop = (e: React.MouseEvent) => e.stopPropagation();
  return (
    <span className="actions" onClick={stop}>
      {canCancel && (
        <button className={compact ? "icon-btn danger" : "btn"} onClick={() => setConfirm("cancel")} title="Cancel job"
          aria-label={`Cancel ${job.name}`}>
          <Icon name="stop" size={compact ? 13 : 14} />{!compact && "Cancel"}
        </button>
      )}
      {job.cancel_requested && CANCELLABLE.has(job.status) && <span className="muted small">stopping…</span>}
      {canRetry && (
        <button className={compact ? "icon-btn" : "btn"} onClick={() => setConfirm("retry")} title="Retry job"
          aria-label={`Retry ${job.name}`}>
          <Icon name="retry" size={compact ? 13 : 14} />{!compact && "Retry"}
        </button>
      )}
      {confirm === "cancel" && (
        <ConfirmDialog title={`Cancel ${job.name}?`} confirm="Cancel job" danger onClose={() => setConfirm(null)}
          onConfirm={() => api.cancelJob(job.id).then(onChange)}>
          {job.status === "RUNNING"
            ? <p>The process group gets SIGTERM, then SIGKILL after {job.stop_grace_s} s. Output written so far is kept.</p>
            : job.status === "LOST"
              ? <p>Its node is out of touch: the job is stopped when the node is back.</p>
              : <p>The job leaves the queue and will not start.</p>}
        </ConfirmDialog>
      )}
      {confirm === "retry" && (
        <ConfirmDialog title={`Retry ${job.name}?`} confirm="Queue again" onClose={() => setConfirm(null)}
          onConfirm={() => api.retryJob(job.id).then(onChange)}>
          <p>The job is queued again as attempt {job.attempt + 1}, with the same command and settings. Its earlier runs and logs stay as they are.</p>
        </ConfirmDialog>
      )}
    </span>
  );
}
