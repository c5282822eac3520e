// Which metric ranks a run's checkpoints when the daemon names none: an eval metric with a
// direction, else a loss, else any metric with a direction.

import type { RunSummary } from "../api/types";

export function primaryMetric(summary: RunSummary | undefined): { name: string; direction: "minimize" | "maximize";
  chosen: boolean } | null {
  if (!summary) return null;
  const set = summary.primary_metric;
  if (set?.direction) return { name: set.name, direction: set.direction, chosen: true };
  const entries = Object.entries(summary.metrics).filter(([, m]) => m.direction).sort(([a], [b]) => a.localeCompare(b));
  const pick = entries.find(([n]) => /^(eval|val|valid|validation|test)[/_.]/.test(n) && /loss/.test(n)) ??
    entries.find(([n]) => /^(eval|val|valid|validation|test)[/_.]/.test(n)) ??
    entries.find(([n]) => /loss/.test(n)) ?? entries[0];
  return pick ? { name: pick[0], direction: pick[1].direction as "minimize" | "maximize", chosen: false } : null;
}
