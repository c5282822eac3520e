// Live metric columns for one or more runs, kept outside React. Fetches replace a run's
// columns (overview or zoomed detail) or append a tail of newer points; listeners of a
// metric are told once per animation frame, however many updates landed in it.

import type { RunMetrics, SeriesColumns } from "../api/types";
import { FrameBatcher, type FrameScheduler } from "./batch";

export interface MetricColumns {
  x: number[];
  val: (number | null)[];
  min: (number | null)[];
  max: (number | null)[];
}

const NAMES = "\u0000names";

function key(run: string, name: string): string {
  return `${run}\u0000${name}`;
}

/** One metric's buckets as columns, dropping empty buckets (a sparse eval metric). */
export function toColumns(x: readonly number[], s: SeriesColumns): MetricColumns {
  const out: MetricColumns = { x: [], val: [], min: [], max: [] };
  for (let i = 0; i < x.length; i++) {
    const count = s.count[i] ?? 0;
    const nan = s.nan?.[i] ?? 0;
    if (!count && !nan) continue;
    out.x.push(x[i]);
    out.val.push(s.avg[i] ?? null);
    out.min.push(s.min[i] ?? null);
    out.max.push(s.max[i] ?? null);
  }
  return out;
}

/**
 * Re-bucket finer columns onto a coarser grid (buckets of `width` from `origin`), so a live
 * tail drawn after a downsampled overview has the same resolution as the overview and
 * its noise does not look like it suddenly grew.
 */
export function rebucket(metrics: RunMetrics, width: number, origin: number): RunMetrics {
  if (width <= metrics.width) return metrics;
  const series: Record<string, SeriesColumns> = {};
  const allX = new Set<number>();
  const perName = new Map<string, Map<number, { min: number; max: number; sum: number; n: number; last: number | null; nan: number }>>();
  for (const [name, s] of Object.entries(metrics.series)) {
    const buckets = new Map<number, { min: number; max: number; sum: number; n: number; last: number | null; nan: number }>();
    for (let i = 0; i < metrics.x.length; i++) {
      const count = s.count[i] ?? 0;
      const nan = s.nan?.[i] ?? 0;
      if (!count && !nan) continue;
      const b = origin + Math.floor((metrics.x[i] - origin) / width) * width;
      let acc = buckets.get(b);
      if (!acc) buckets.set(b, (acc = { min: Infinity, max: -Infinity, sum: 0, n: 0, last: null, nan: 0 }));
      acc.nan += nan;
      const avg = s.avg[i];
      if (count && avg !== null) {
        acc.min = Math.min(acc.min, s.min[i] ?? avg);
        acc.max = Math.max(acc.max, s.max[i] ?? avg);
        acc.sum += avg * count;
        acc.n += count;
        acc.last = s.last[i] ?? avg;
      }
      allX.add(b);
    }
    perName.set(name, buckets);
  }
  const x = [...allX].sort((a, b) => a - b);
  for (const [name, buckets] of perName) {
    const col: SeriesColumns = { min: [], max: [], avg: [], last: [], count: [], nan: [] };
    for (const b of x) {
      const acc = buckets.get(b);
      const has = acc && acc.n > 0;
      col.min.push(has ? acc!.min : null);
      col.max.push(has ? acc!.max : null);
      col.avg.push(has ? acc!.sum / acc!.n : null);
      col.last.push(has ? acc!.last : null);
      col.count.push(acc?.n ?? 0);
      col.nan.push(acc?.nan ?? 0);
    }
    series[name] = col;
  }
  return { ...metrics, width, x, series };
}

export class SeriesStore {
  private readonly data = new Map<string, MetricColumns>();
  private readonly runNames = new Map<string, Set<string>>();
  private readonly listeners = new Map<string, Set<() => void>>();
  private readonly batcher: FrameBatcher<string>;
  /** Bucket width and first x of the last full fetch, per run (width 1: raw points). */
  readonly widths = new Map<string, number>();
  private readonly origins = new Map<string, number>();

  constructor(frames?: FrameScheduler) {
    this.batcher = new FrameBatcher((keys) => this.flush(keys), frames);
  }

  get flushes(): number {
    return this.batcher.flushes;
  }

  runs(): string[] {
    return [...this.runNames.keys()];
  }

  /** Every metric name over all runs, sorted. */
  names(): string[] {
    const all = new Set<string>();
    for (const names of this.runNames.values()) for (const name of names) all.add(name);
    return [...all].sort();
  }

  columns(run: string, name: string): MetricColumns | undefined {
    return this.data.get(key(run, name));
  }

  points(run: string): number {
    let most = 0;
    for (const name of this.runNames.get(run) ?? []) most = Math.max(most, this.data.get(key(run, name))?.x.length ?? 0);
    return most;
  }

  /** The last x seen for a run (the next tail starts after it), or null. */
  lastX(run: string): number | null {
    let last: number | null = null;
    for (const name of this.runNames.get(run) ?? []) {
      const x = this.data.get(key(run, name))?.x;
      if (x?.length) last = last === null ? x[x.length - 1] : Math.max(last, x[x.length - 1]);
    }
    return last;
  }

  /** Replace a run's columns with a fresh fetch (overview, or detail after a zoom). */
  replace(run: string, metrics: RunMetrics): void {
    const before = this.runNames.get(run) ?? new Set<string>();
    const names = new Set(Object.keys(metrics.series));
    for (const name of before) {
      if (!names.has(name)) {
        this.data.delete(key(run, name));
        this.batcher.mark(name);
      }
    }
    for (const name of names) {
      this.data.set(key(run, name), toColumns(metrics.x, metrics.series[name]));
      this.batcher.mark(name);
    }
    this.runNames.set(run, names);
    this.widths.set(run, metrics.width);
    if (metrics.x.length) this.origins.set(run, metrics.x[0]);
    if (!sameSet(before, names)) this.batcher.mark(NAMES);
  }

  /**
   * Merge a tail fetched from x = `from` on: per metric in `metrics`, what the run held at
   * or after `from` is replaced by the fresh columns (the last bucket of an overview is
   * refined, new points are added). Metrics absent from `metrics` are left alone.
   */
  append(run: string, fetched: RunMetrics, from: number): number {
    const width = this.widths.get(run) ?? 1;
    const metrics = width > fetched.width ? rebucket(fetched, width, this.origins.get(run) ?? from) : fetched;
    let added = 0;
    let names = this.runNames.get(run);
    if (!names) {
      names = new Set();
      this.runNames.set(run, names);
    }
    for (const [name, series] of Object.entries(metrics.series)) {
      const fresh = toColumns(metrics.x, series);
      const k = key(run, name);
      const have = this.data.get(k);
      if (!have) {
        if (!fresh.x.length) continue;
        this.data.set(k, fresh);
        names.add(name);
        this.batcher.mark(NAMES);
        this.batcher.mark(name);
        added += fresh.x.length;
        continue;
      }
      let cut = have.x.length;
      while (cut > 0 && have.x[cut - 1] >= from) cut--;
      const removed = have.x.length - cut;
      if (!removed && !fresh.x.length) continue;
      have.x.length = cut;
      have.val.length = cut;
      have.min.length = cut;
      have.max.length = cut;
      for (let i = 0; i < fresh.x.length; i++) {
        have.x.push(fresh.x[i]);
        have.val.push(fresh.val[i]);
        have.min.push(fresh.min[i]);
        have.max.push(fresh.max[i]);
      }
      added += fresh.x.length - removed;
      this.batcher.mark(name);
    }
    return added;
  }

  removeRun(run: string): void {
    for (const name of this.runNames.get(run) ?? []) {
      this.data.delete(key(run, name));
      this.batcher.mark(name);
    }
    this.runNames.delete(run);
    this.batcher.mark(NAMES);
  }

  /** Call `listener` (at most once a frame) when metric `name` changes. */
  subscribe(name: string, listener: () => void): () => void {
    let set = this.listeners.get(name);
    if (!set) {
      set = new Set();
      this.listeners.set(name, set);
    }
    set.add(listener);
    return () => set.delete(listener);
  }

  /** Call `listener` when the set of metric names changes. */
  subscribeNames(listener: () => void): () => void {
    return this.subscribe(NAMES, listener);
  }

  dispose(): void {
    this.batcher.dispose();
    this.listeners.clear();
  }

  private flush(keys: Set<string>): void {
    for (const k of keys) for (const listener of this.listeners.get(k) ?? []) listener();
  }
}

function sameSet(a: Set<string>, b: Set<string>): boolean {
  if (a.size !== b.size) return false;
  for (const v of a) if (!b.has(v)) return false;
  return true;
}
