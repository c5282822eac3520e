// API tokens in words for Settings > Tokens: whether one still works, what its limits are,
// and how much of its GPU-hour budget is left.

import type { ApiToken, TokenLimits } from "../api/types";

export type TokenState = "active" | "revoked" | "expired";

export function tokenState(t: Pick<ApiToken, "revoked_at" | "expires_at">, now: number): TokenState {
  if (t.revoked_at !== null) return "revoked";
  if (t.expires_at !== null && t.expires_at <= now) return "expired";
  return "active";
}

const hours = (h: number) => `${Number(h.toFixed(2))}`;

/** "≤ 2 GPUs a job · nodes gpu-a, gpu-b · dirs /data · ≤ 5 queued · jobs ≤ 4 h · unattended"; "" for none. */
export function limitsText(l: TokenLimits | null): string {
  if (!l) return "";
  const parts: string[] = [];
  if (l.max_gpus_per_job !== null && l.max_gpus_per_job !== undefined) parts.push(`≤ ${l.max_gpus_per_job} GPU${l.max_gpus_per_job === 1 ? "" : "s"} a job`);
  if (l.allowed_nodes?.length) parts.push(`nodes ${l.allowed_nodes.join(", ")}`);
  if (l.allowed_dirs?.length) parts.push(`dirs ${l.allowed_dirs.join(", ")}`);
  if (l.max_queued_jobs !== null && l.max_queued_jobs !== undefined) parts.push(`≤ ${l.max_queued_jobs} queued`);
  if (l.max_job_hours !== null && l.max_job_hours !== undefined) parts.push(`jobs ≤ ${hours(l.max_job_hours)} h`);
  if (l.unattended) parts.push("unattended");
  return parts.join(" · ");
}

export interface Budget {
  total: number;
  used: number;
  left: number;
  /** Left of the total, 0..1. */
  share: number;
  text: string;
}

/** The GPU-hour budget: "7.5 of 10 GPU-h left (2.5 used)"; null for a token without one. */
export function budget(t: Pick<ApiToken, "limits" | "used_gpu_hours" | "remaining_gpu_hours">): Budget | null {
  const total = t.limits?.gpu_hours;
  if (total === null || total === undefined) return null;
  const used = t.used_gpu_hours ?? 0;
  const left = t.remaining_gpu_hours ?? Math.max(0, total - used);
  return { total, used, left, share: total ? left / total : 0,
    text: `${hours(left)} of ${hours(total)} GPU-h left (${hours(used)} used)` };
}
