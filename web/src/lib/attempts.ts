// A job's attempt as people read it, as `gpuplanectl` says it (ctl/render.py): the API's `attempt`
// counts the attempts started, and `max_attempts` is the retry policy's, which a manual retry is
// not bound by. So a job retried by hand past its policy is "attempt 3 (2 retries)", never "3/1",
// and a waiting job (new, or queued again) shows the attempt it will run as, not the one that ended.
import type { Job } from "../api/types";
import { WAITING } from "./jobStates";

type AttemptFields = Pick<Job, "status" | "attempt" | "max_attempts">;

/** The attempt shown: the one running or ended, or for a waiting job the one it will run as. */
export function shownAttempt(job: AttemptFields): number {
  return job.attempt + (WAITING.has(job.status) ? 1 : 0);
}

/** For a table cell: "2/3" within a retry policy; "2" without one, or past it. */
export function attemptText(job: AttemptFields): string {
  const attempt = shownAttempt(job);
  return job.max_attempts <= 1 || attempt > job.max_attempts ? String(attempt) : `${attempt}/${job.max_attempts}`;
}

/** For a job's page: "2 of 3" within a retry policy; "1", or "3 (2 retries)" past it. */
export function attemptDetail(job: AttemptFields): string {
  const attempt = shownAttempt(job);
  const most = job.max_attempts;
  if (most > 1 && attempt <= most) return `${attempt} of ${most}`;
  if (attempt <= 1) return String(attempt);
  const retries = `${attempt - 1} ${attempt === 2 ? "retry" : "retries"}`;
  return most > 1 ? `${attempt} (${retries}; the retry policy allows ${most})` : `${attempt} (${retries})`;
}
