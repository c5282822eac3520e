// The runs table's maths, all pure: each run's cells (config values and the chosen metric
// summaries), filters, sort, groups with mean/min/max per metric, the keys that differ, and
// deltas against a baseline run.

import { compareValues, configId, formatValue, isMissing, kindOf, metricId, valueKey, type CellValue, type Column } from "./columns";
import { chosenSummary, pickSummary, type SummaryChoice } from "./summary";
import type { WorkspaceMetricInfo, WorkspaceRun } from "./types";

export interface TableRow {
  run: WorkspaceRun;
  /** Column id to value; metric columns hold the chosen summary. */
  values: Record<string, CellValue>;
  /** Metric column id to the step of its chosen summary. */
  steps: Record<string, number | null>;
}

export type Filter =
  | { kind: "range"; min: number | null; max: number | null }
  | { kind: "set"; values: string[] }
  | { kind: "text"; text: string };
export type Filters = Record<string, Filter>;

export function buildRows(runs: readonly WorkspaceRun[], metrics: readonly WorkspaceMetricInfo[],
  choices: Record<string, SummaryChoice>): TableRow[] {
  return runs.map((run) => {
    const values: Record<string, CellValue> = {
      status: run.status, name: run.name ?? run.id, tags: run.tags.join(", "), created: run.created_at,
    };
    const steps: Record<string, number | null> = {};
    for (const [key, value] of Object.entries(run.config)) values[configId(key)] = value;
    for (const m of metrics) {
      const point = pickSummary(run.metrics[m.name], chosenSummary(choices, m.name, m.direction), m.direction);
      values[metricId(m.name)] = point ? point.value : undefined;
      steps[metricId(m.name)] = point ? point.step : null;
    }
    return { run, values, steps };
  });
}

/** The config columns of the runs, in the server's key order, each typed by its values. */
export function configColumns(keys: readonly string[], rows: readonly TableRow[]): Column[] {
  return keys.map((key) => ({
    id: configId(key), label: key, group: "config" as const, kind: kindOf(rows.map((r) => r.values[configId(key)])),
  }));
}

export function metricColumns(metrics: readonly WorkspaceMetricInfo[]): Column[] {
  return metrics.map((m) => ({ id: metricId(m.name), label: m.name, group: "metric" as const, kind: "number" as const }));
}

export function passesFilter(value: CellValue, filter: Filter): boolean {
  if (filter.kind === "range") {
    if (typeof value !== "number") return false;
    return (filter.min === null || value >= filter.min) && (filter.max === null || value <= filter.max);
  }
  if (filter.kind === "set") return filter.values.includes(valueKey(value));
  const needle = filter.text.trim().toLowerCase();
  return !needle || (value !== undefined && formatValue(value).toLowerCase().includes(needle));
}

export function applyFilters(rows: readonly TableRow[], filters: Filters): TableRow[] {
  const active = Object.entries(filters);
  if (!active.length) return [...rows];
  return rows.filter((row) => active.every(([col, f]) => passesFilter(row.values[col], f)));
}

/** Sorted by one column ("-" first: descending); null, absent and NaN cells stay last either way. */
export function sortRows(rows: readonly TableRow[], sort: string): TableRow[] {
  if (!sort) return [...rows];
  const desc = sort.startsWith("-");
  const col = desc ? sort.slice(1) : sort;
  return [...rows].sort((a, b) => {
    const x = a.values[col];
    const y = b.values[col];
    const missing = isMissing(x) !== isMissing(y);
    const order = compareValues(x, y);
    return missing || !desc ? order : -order;
  });
}

export interface Stat {
  n: number;
  mean: number;
  min: number;
  max: number;
}

export function stat(values: readonly CellValue[]): Stat | null {
  const nums = values.filter((v): v is number => typeof v === "number" && Number.isFinite(v));
  if (!nums.length) return null;
  let min = Infinity;
  let max = -Infinity;
  let sum = 0;
  for (const v of nums) {
    sum += v;
    if (v < min) min = v;
    if (v > max) max = v;
  }
  return { n: nums.length, mean: sum / nums.length, min, max };
}

export interface RowGroup {
  key: string;
  value: CellValue;
  rows: TableRow[];
  /** Metric column id to mean, min and max of the group's chosen summaries. */
  stats: Record<string, Stat | null>;
}

/** Rows grouped by a column's value (runs keep their order inside a group); groups in the value's order. */
export function groupRows(rows: readonly TableRow[], col: string, metricCols: readonly string[]): RowGroup[] {
  const groups = new Map<string, RowGroup>();
  for (const row of rows) {
    const value = row.values[col];
    const key = valueKey(value);
    let g = groups.get(key);
    if (!g) {
      g = { key, value, rows: [], stats: {} };
      groups.set(key, g);
    }
    g.rows.push(row);
  }
  const out = [...groups.values()].sort((a, b) => compareValues(a.value, b.value));
  for (const g of out) for (const m of metricCols) g.stats[m] = stat(g.rows.map((r) => r.values[m]));
  return out;
}

/** The config columns whose values are not all the same across the rows (absent counts as a value). */
export function differingColumns(rows: readonly TableRow[], cols: readonly string[]): string[] {
  return cols.filter((col) => {
    if (rows.length < 2) return false;
    const first = valueKey(rows[0].values[col]);
    const firstAbsent = rows[0].values[col] === undefined;
    return rows.some((r) => valueKey(r.values[col]) !== first || (r.values[col] === undefined) !== firstAbsent);
  });
}

/** A numeric cell's difference from the baseline's; null where either is not a number. */
export function delta(value: CellValue, base: CellValue): number | null {
  return typeof value === "number" && typeof base === "number" ? value - base : null;
}

/** "+0.012" / "−3": a delta as the table shows it, signed; "=" where equal. */
export function fmtDelta(d: number): string {
  if (d === 0) return "=";
  const text = formatValue(Math.abs(d));
  return d > 0 ? `+${text}` : `−${text}`;
}
