// A sweep's progress and results in words and numbers, for the Sweeps pages: what its
// counts add up to, its parameters' names in a stable order, a trial's values as text, and
// which actions its state allows (the daemon refuses the others with a 409).

import type { Sweep, SweepTrial } from "../api/types";

export interface Progress {
  done: number;
  running: number;
  queued: number;
  failed: number;
  cancelled: number;
  total: number;
  /** Ended (done, failed or cancelled) out of the total, 0..1. */
  ended: number;
}

export function progress(sweep: Pick<Sweep, "counts">): Progress {
  const c = sweep.counts;
  const ended = c.succeeded + c.failed + c.cancelled;
  return { done: c.succeeded, running: c.running, queued: c.queued, failed: c.failed, cancelled: c.cancelled,
    total: c.total, ended: c.total ? ended / c.total : 0 };
}

/** "3 done · 1 running · 2 queued · 1 failed" (cancelled only when some are). */
export function progressText(p: Progress): string {
  const parts = [`${p.done} done`, `${p.running} running`, `${p.queued} queued`, `${p.failed} failed`];
  if (p.cancelled) parts.push(`${p.cancelled} cancelled`);
  return parts.join(" · ");
}

/** The parameters' names: in the order the trials give them (a grid's first name varies slowest). */
export function parameterNames(trials: readonly Pick<SweepTrial, "values">[]): string[] {
  const names: string[] = [];
  for (const t of trials) for (const k of Object.keys(t.values)) if (!names.includes(k)) names.push(k);
  return names;
}

export function valueText(v: unknown): string {
  if (v === null || v === undefined) return "";
  if (typeof v === "string") return v;
  return JSON.stringify(v);
}

/** "lr=0.001, batch=32". */
export function valuesText(values: Record<string, unknown>): string {
  return Object.entries(values).map(([k, v]) => `${k}=${valueText(v)}`).join(", ");
}

export type SweepAction = "pause" | "resume" | "retry-failed" | "cancel";

/** What the sweep's state allows: a cancelled sweep takes none, an ended one only a retry of its failed trials. */
export function allowedActions(sweep: Pick<Sweep, "status" | "paused" | "counts">): Set<SweepAction> {
  const out = new Set<SweepAction>();
  if (sweep.status === "CANCELLED") return out;
  const open = sweep.counts.queued + sweep.counts.running > 0;
  if (sweep.paused) out.add("resume");
  else if (sweep.counts.queued > 0) out.add("pause");
  if (sweep.counts.failed > 0) out.add("retry-failed");
  if (open) out.add("cancel");
  return out;
}
