// The table's rows as the charts take them (one flat key space: "c.<config key>",
// "m.<metric>"), and the sweep's axes: every config key that varies, then the metric.

import { kindOf, type CellValue, type Column } from "./columns";
import type { TableRow } from "./table";
import type { Axis, Value, VizRow } from "./viz";

/** A cell as a chart value: absent is null; a list or object is its JSON text (a category). */
export function chartValue(v: CellValue): Value {
  if (v === undefined) return null;
  if (v !== null && typeof v === "object") return JSON.stringify(v);
  return v;
}

export function toVizRows(rows: readonly TableRow[], keys: readonly string[]): VizRow[] {
  return rows.map((r) => {
    const values: Record<string, Value> = {};
    for (const k of keys) values[k] = chartValue(r.values[k]);
    return { id: r.run.id, values };
  });
}

/** Log when every value is positive and they span two decades or more (a learning rate), else linear. */
export function numericScale(values: readonly Value[]): "linear" | "log" {
  const nums = values.filter((v): v is number => typeof v === "number" && Number.isFinite(v));
  if (!nums.length || nums.some((v) => v <= 0)) return "linear";
  return Math.max(...nums) / Math.min(...nums) >= 100 ? "log" : "linear";
}

/** An axis over a key of the rows: numeric where every value is a number (nulls aside), else categories. */
export function axisOf(key: string, label: string, rows: readonly VizRow[]): Axis {
  const values = rows.map((r) => r.values[key]);
  return kindOf(values) === "number" ? { key, label, kind: numericScale(values) } : { key, label, kind: "category" };
}

/** The parallel coordinates' axes: the config columns whose values vary, then the metric's. */
export function sweepAxes(configCols: readonly Column[], varying: ReadonlySet<string>, metric: Column | null,
  rows: readonly VizRow[]): Axis[] {
  const axes = configCols.filter((c) => varying.has(c.id)).map((c) => axisOf(c.id, c.label, rows));
  if (metric) axes.push(axisOf(metric.id, metric.label, rows));
  return axes;
}
