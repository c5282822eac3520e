// Turns a store's columns into uPlot's aligned data for one metric panel: a single run
// gets a min/max band (what a downsampled bucket spans), its line and its smoothed line;
// several runs are joined on x, a line and a smoothed line each.

import uPlot from "uplot";
import { ema } from "./ema";
import type { MetricColumns, SeriesStore } from "./series";

export interface PanelRun {
  id: string;
  label: string;
  color: string;
}

function positive(values: (number | null)[]): (number | null)[] {
  return values.map((v) => (v !== null && v > 0 ? v : null));
}

function prep(cols: MetricColumns, smoothing: number, logY: boolean) {
  const val = logY ? positive(cols.val) : cols.val;
  return { x: cols.x, val, smooth: smoothing > 0 ? ema(val, smoothing) : val, min: logY ? positive(cols.min) : cols.min,
    max: logY ? positive(cols.max) : cols.max };
}

/** Single run: [x, min, max, value, smoothed]. Several: [x, r1 value, r1 smoothed, r2 value, ...]. */
export function panelData(store: SeriesStore, name: string, runs: readonly PanelRun[], smoothing: number,
  logY = false): uPlot.AlignedData {
  if (runs.length === 1) {
    const cols = store.columns(runs[0].id, name);
    if (!cols) return [[], [], [], [], []];
    const p = prep(cols, smoothing, logY);
    return [p.x, p.min, p.max, p.val, p.smooth];
  }
  const tables: uPlot.AlignedData[] = [];
  for (const run of runs) {
    const cols = store.columns(run.id, name);
    if (!cols || !cols.x.length) {
      tables.push([[], [], []]);
      continue;
    }
    const p = prep(cols, smoothing, logY);
    tables.push([p.x, p.val, p.smooth]);
  }
  const nonEmpty = tables.filter((t) => t[0].length);
  if (!nonEmpty.length) return [[], ...runs.flatMap(() => [[], []])];
  if (nonEmpty.length === tables.length) return uPlot.join(tables);
  // uPlot.join needs every table to have points: join the non-empty ones, then put
  // all-null columns back where the empty runs sit.
  const joined = uPlot.join(nonEmpty);
  const out: uPlot.AlignedData[number][] = [joined[0]];
  let k = 1;
  for (const t of tables) {
    if (t[0].length) {
      out.push(joined[k], joined[k + 1]);
      k += 2;
    } else {
      const nulls = new Array(joined[0].length).fill(null);
      out.push(nulls, nulls);
    }
  }
  return out as uPlot.AlignedData;
}

/** The index of the nearest non-null value of `column` to `idx` (within `reach`), or -1. */
export function nearestValue(column: ArrayLike<number | null | undefined>, idx: number, reach = 64): number {
  if (idx < 0 || idx >= column.length) return -1;
  if (column[idx] !== null && column[idx] !== undefined) return idx;
  for (let d = 1; d <= reach; d++) {
    const lo = idx - d;
    const hi = idx + d;
    if (lo >= 0 && column[lo] !== null && column[lo] !== undefined) return lo;
    if (hi < column.length && column[hi] !== null && column[hi] !== undefined) return hi;
  }
  return -1;
}

/** The index of the last non-null value of `column`, or -1. */
export function lastValue(column: ArrayLike<number | null | undefined>): number {
  for (let i = column.length - 1; i >= 0; i--) if (column[i] !== null && column[i] !== undefined) return i;
  return -1;
}
