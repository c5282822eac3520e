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

const NONFINITE: Record<string, number> = { NaN: NaN, Infinity: Infinity, "-Infinity": -Infinity };

/** A point's value as a number: the wire spells a non-finite last value as a string. */
export function pointValue(value: number | string | null | undefined): number | null {
  if (typeof value === "number") return value;
  return typeof value === "string" && value in NONFINITE ? NONFINITE[value] : null;
}

/** The chosen point of a metric, or null where the run has none. Best falls back to the
 * direction's extreme, and to the last value where the metric has no direction. */
export function pickSummary(metric: WorkspaceMetric | undefined, choice: SummaryChoice, direction: Direction): MetricPoint | null {
  if (!metric) return null;
  const point = choice === "best"
    ? metric.best ?? (direction === "min" ? metric.min : direction === "max" ? metric.max : metric.last)
    : metric[choice];
  const value = pointValue(point?.value);
  return point && value !== null ? { step: point.step, value } : null;
}
