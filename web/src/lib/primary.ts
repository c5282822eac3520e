// Which metric ranks a run's checkpoints when the daemon names none: an eval metric with a
// direction, else a loss, else any metric with a direction.

import type { Checkpoint, RunSummary } from "../api/types";

export function primaryMetric(summary: RunSummary | undefined): { name: string; direction: "minimize" | "maximize" } | null {
  if (!summary) return null;
  const entries = Object.entries(summary.metrics).filter(([, m]) => m.direction).sort(([a], [b]) => a.localeCompare(b));
  const pick = entries.find(([n]) => /^(eval|val|valid|validation|test)[/_.]/.test(n) && /loss/.test(n)) ??
    entries.find(([n]) => /^(eval|val|valid|validation|test)[/_.]/.test(n)) ??
    entries.find(([n]) => /loss/.test(n)) ?? entries[0];
  return pick ? { name: pick[0], direction: pick[1].direction as "minimize" | "maximize" } : null;
}

/** The checkpoint's value of `metric`: from its metadata when it has one, else from `lookup(step)`. */
export function checkpointValue(ckpt: Checkpoint, metric: string, lookup: (step: number) => number | null): number | null {
  const meta = ckpt.metadata as { metrics?: Record<string, unknown> } | null | undefined;
  const fromMeta = meta?.metrics?.[metric] ?? (meta as Record<string, unknown> | null | undefined)?.[metric];
  if (typeof fromMeta === "number") return fromMeta;
  return ckpt.step === null ? null : lookup(ckpt.step);
}

/** The id of the best checkpoint by `direction`, or null when none has a value. */
export function bestCheckpoint(values: Map<string, number | null>, direction: "minimize" | "maximize"): string | null {
  let best: string | null = null;
  let bestValue = 0;
  for (const [id, v] of values) {
    if (v === null || !Number.isFinite(v)) continue;
    if (best === null || (direction === "minimize" ? v < bestValue : v > bestValue)) {
      best = id;
      bestValue = v;
    }
  }
  return best;
}
