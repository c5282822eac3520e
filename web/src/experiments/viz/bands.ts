// Group bands: per x, the mean of a group's runs with their min..max around it. Runs are
// logged (and bucketed) at different steps, so each run is read at every x of the common
// grid by linear interpolation between its own points, and only inside its own span: a
// run that stopped early leaves the band there instead of dragging it flat.

import uPlot from "uplot";
import { ema } from "../../charts/ema";
import type { SeriesStore } from "../../charts/series";

export interface Line {
  x: readonly number[];
  y: readonly (number | null)[];
}

export interface Band {
  mean: (number | null)[];
  min: (number | null)[];
  max: (number | null)[];
  /** How many runs had a value at each x. */
  count: number[];
}

/** Every x of the lines, sorted, once. */
export function unionX(lines: readonly Line[]): number[] {
  const all = new Set<number>();
  for (const l of lines) for (const x of l.x) all.add(x);
  return [...all].sort((a, b) => a - b);
}

/** The band of `lines` on the grid `xs` (sorted ascending). */
export function bandOn(xs: readonly number[], lines: readonly Line[]): Band {
  const n = xs.length;
  const sum = new Float64Array(n);
  const count = new Array<number>(n).fill(0);
  const min = new Array<number | null>(n).fill(null);
  const max = new Array<number | null>(n).fill(null);
  for (const line of lines) {
    // Its points with values, in x order.
    const px: number[] = [];
    const py: number[] = [];
    for (let i = 0; i < line.x.length; i++) {
      const v = line.y[i];
      if (v !== null && v !== undefined && Number.isFinite(v)) {
        px.push(line.x[i]);
        py.push(v);
      }
    }
    if (!px.length) continue;
    let j = 0;
    for (let i = 0; i < n; i++) {
      const x = xs[i];
      if (x < px[0]) continue;
      if (x > px[px.length - 1]) break;
      while (j + 1 < px.length && px[j + 1] <= x) j++;
      const v = px[j] === x || j + 1 >= px.length ? py[j] : py[j] + ((py[j + 1] - py[j]) * (x - px[j])) / (px[j + 1] - px[j]);
      sum[i] += v;
      count[i]++;
      if (min[i] === null || v < min[i]!) min[i] = v;
      if (max[i] === null || v > max[i]!) max[i] = v;
    }
  }
  const mean = count.map((c, i) => (c ? sum[i] / c : null));
  return { mean, min, max, count };
}

export interface BandGroup {
  key: string;
  label: string;
  color: string;
  runs: string[];
}

/** Group order and colours from the runs: a group takes the colour of its first run. */
export function groupRuns(runs: readonly { id: string; color: string; group?: string }[]): BandGroup[] {
  const out = new Map<string, BandGroup>();
  for (const r of runs) {
    const key = r.group ?? "";
    let g = out.get(key);
    if (!g) out.set(key, (g = { key, label: key || "(none)", color: r.color, runs: [] }));
    g.runs.push(r.id);
  }
  return [...out.values()];
}

/** uPlot data for one metric's group bands: [x, then per group min, max, mean]. Smoothing applies to each run first. */
export function bandsData(store: SeriesStore, name: string, groups: readonly BandGroup[], smoothing: number): uPlot.AlignedData {
  const perGroup = groups.map((g) => g.runs.flatMap((id): Line[] => {
    const cols = store.columns(id, name);
    if (!cols || !cols.x.length) return [];
    return [{ x: cols.x, y: smoothing > 0 ? ema(cols.val, smoothing) : cols.val }];
  }));
  const xs = unionX(perGroup.flat());
  const out: (number | null)[][] = [xs];
  for (const lines of perGroup) {
    const b = bandOn(xs, lines);
    out.push(b.min, b.max, b.mean);
  }
  return out as uPlot.AlignedData;
}
