// Live points as GET /runs/metrics/stream pushes them (each `points` event carries one committed
// batch of one run), put into buckets on the grid of the overview the panel read, so they
// append to its columns with no tail fetch. After each read of a run's metric, points count
// from the bucket after the read's last one: that bucket is the server's, and a point may be
// both in the read and in an event, so nothing is counted twice.

import type { RunMetrics, SeriesColumns } from "../../api/types";

/** One metric's points in a `points` event: columns aligned by index. */
export interface StreamedSeries {
  step: number[];
  ts: number[];
  value: (number | null)[];
  /** Indices whose value is not finite (value null). */
  nonfinite?: Record<string, number[]>;
}

/** A `points` event of the several-run stream. */
export interface RunPoints {
  run_id: string;
  seq: number;
  series: Record<string, StreamedSeries>;
}

/** The event's data, or null when it is not a batch of a run. */
export function parseRunPoints(data: string): RunPoints | null {
  try {
    const p = JSON.parse(data) as Partial<RunPoints>;
    if (typeof p.run_id !== "string" || typeof p.seq !== "number" || !p.series || typeof p.series !== "object") return null;
    return p as RunPoints;
  } catch {
    return null;
  }
}

interface Bucket {
  x: number;
  min: number;
  max: number;
  sum: number;
  n: number;
  last: number | null;
  nan: number;
  /** The last x taken into it (a point sent twice is taken once). */
  lastRaw: number;
}

interface Grid {
  width: number;
  /** Where the next bucket may start (the grid's origin); null: from the first point. */
  origin: number | null;
  open: Bucket | null;
}

function key(run: string, name: string): string {
  return `${run}\u0000${name}`;
}

/** Per run and metric: the bucket grid streamed points fill. */
export class LiveBuckets {
  private readonly grids = new Map<string, Grid>();

  /** After a read of `name` for `run` (buckets of `width`, the last at `lastX`): points go on from the next bucket. */
  restart(run: string, name: string, lastX: number | null, width: number): void {
    const w = Math.max(1, width);
    this.grids.set(key(run, name), { width: w, origin: lastX === null ? null : lastX + w, open: null });
  }

  has(run: string, name: string): boolean {
    return this.grids.has(key(run, name));
  }

  clear(): void {
    this.grids.clear();
  }

  /**
   * The event's points of `name` as columns for SeriesStore.append(run, metrics, from): the
   * buckets they touched, from the first. Null when none is new, or the metric was never read.
   */
  take(run: string, name: string, s: StreamedSeries, axis: "step" | "ts"): { metrics: RunMetrics; from: number } | null {
    const grid = this.grids.get(key(run, name));
    const xs = s[axis];
    if (!grid || !Array.isArray(xs)) return null;
    const nan = new Set(s.nonfinite?.NaN ?? []);
    const touched: Bucket[] = [];
    for (let i = 0; i < xs.length; i++) {
      const x = xs[i];
      const value = s.value[i];
      const isNaN = nan.has(i);
      if (typeof x !== "number" || (!isNaN && typeof value !== "number")) continue; // an infinity: nothing to draw
      grid.origin ??= x;
      if (x < grid.origin) continue; // inside the read's last bucket or before it
      const start = grid.origin + Math.floor((x - grid.origin) / grid.width) * grid.width;
      let b = grid.open;
      if (b && (start < b.x || x <= b.lastRaw)) continue; // sent before
      if (!b || start > b.x) {
        b = grid.open = { x: start, min: Infinity, max: -Infinity, sum: 0, n: 0, last: null, nan: 0, lastRaw: x };
      }
      if (touched[touched.length - 1] !== b) touched.push(b);
      b.lastRaw = x;
      if (isNaN) {
        b.nan++;
        continue;
      }
      const v = value as number;
      b.min = Math.min(b.min, v);
      b.max = Math.max(b.max, v);
      b.sum += v;
      b.n++;
      b.last = v;
    }
    if (!touched.length) return null;
    const col: SeriesColumns = { min: [], max: [], avg: [], last: [], count: [], nan: [] };
    for (const b of touched) {
      col.min.push(b.n ? b.min : null);
      col.max.push(b.n ? b.max : null);
      col.avg.push(b.n ? b.sum / b.n : null);
      col.last.push(b.last);
      col.count.push(b.n);
      col.nan.push(b.nan);
    }
    return {
      metrics: { run_id: run, x_axis: axis, resolution: "raw", width: grid.width, x: touched.map((b) => b.x), series: { [name]: col } },
      from: touched[0].x,
    };
  }
}
