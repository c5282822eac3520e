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

export class SeriesStore {
  private readonly data = new Map<string, MetricColumns>();
  private readonly runNames = new Map<string, Set<string>>();
  private readonly listeners = new Map<string, Set<() => void>>();
  private readonly batcher: FrameBatcher<string>;
  /** Bucket width of the last full fetch, per run (1: raw points). */
  readonly widths = new Map<string, number>();

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
    if (!sameSet(before, names)) this.batcher.mark(NAMES);
  }

  /**
   * Merge a tail fetched from x = `from` on: per metric in `metrics`, what the run held at
   * or after `from` is replaced by the fresh columns (the last bucket of an overview is
   * refined, new points are added). Metrics absent from `metrics` are left alone.
   */
  append(run: string, metrics: RunMetrics, from: number): number {
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
