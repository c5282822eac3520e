// Which value of a metric a column shows: its last, its min, its max, or its best by the
// metric's direction (the min of a loss, the max of an accuracy), each with its step.

import type { Direction, MetricPoint, WorkspaceMetric } from "./types";

export const SUMMARIES = ["last", "min", "max", "best"] as const;
export type SummaryChoice = (typeof SUMMARIES)[number];

/** Best where the metric has a direction (what a sweep optimises), else the last value. */
export function defaultSummary(direction: Direction): SummaryChoice {
  return direction ? "best" : "last";
}

export function chosenSummary(choices: Record<string, SummaryChoice>, name: string, direction: Direction): SummaryChoice {
  return choices[name] ?? defaultSummary(direction);
}

/** The chosen point of a metric, or null where the run has none. Best falls back to the
 * direction's extreme, and to the last value where the metric has no direction. */
export function pickSummary(metric: WorkspaceMetric | undefined, choice: SummaryChoice, direction: Direction): MetricPoint | null {
  if (!metric) return null;
  const point = choice === "best"
    ? metric.best ?? (direction === "min" ? metric.min : direction === "max" ? metric.max : metric.last)
    : metric[choice];
  return point && point.value !== null && point.value !== undefined ? point : null;
}
