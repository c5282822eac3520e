// Event markers for overlaid charts: each run's warnings and critical events (and its
// checkpoints) at their step or time, in the run's own color.

import type { GpuEvent } from "../api/types";

export interface RunMark {
  x: number;
  color: string;
  label: string;
  critical?: boolean;
}

export function compareMarks(eventsByRun: ReadonlyMap<string, readonly GpuEvent[]>, colors: ReadonlyMap<string, string>,
  labels: ReadonlyMap<string, string>, x: "step" | "ts"): RunMark[] {
  const out: RunMark[] = [];
  for (const [runId, events] of eventsByRun) {
    for (const e of events) {
      if (e.severity === "info" && !e.type.startsWith("CHECKPOINT")) continue;
      const at = x === "step" ? e.step : e.ts;
      if (at === null || at === undefined) continue;
      out.push({ x: at, color: colors.get(runId) ?? "#888", label: `${e.type} · ${labels.get(runId) ?? runId}`,
        critical: e.severity === "critical" });
    }
  }
  return out.sort((a, b) => a.x - b.x);
}
