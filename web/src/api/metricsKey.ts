// The identity of a chart-data request, shared by the prefetcher and the loader.

import { list, oneOf, range } from "../router/urlState";

export const DEFAULT_POINTS = 1000;

/** The URL parameters that decide a run or compare page's first metrics request. */
export const metricsViewSchema = {
  tab: oneOf(["metrics", "system", "events", "checkpoints", "details"] as const, "metrics"),
  x: oneOf(["step", "ts"] as const, "step"),
  xr: range(),
  runs: list(),
};

export function metricsKey(runs: readonly string[], q: { x: string; points: number; start?: number; end?: number }): string {
  return `metrics:${runs.join(",")}:${q.x}:${q.points}:${q.start ?? ""}:${q.end ?? ""}`;
}
