// Rolling columns for live sparklines (node readings every 2 s): append, keep a time
// window, tell each key's listeners once per animation frame.

import { FrameBatcher, type FrameScheduler } from "./batch";

export interface Rolling {
  x: number[];
  y: (number | null)[];
}

export class LiveStore {
  private readonly data = new Map<string, Rolling>();
  private readonly listeners = new Map<string, Set<() => void>>();
  private readonly batcher: FrameBatcher<string>;
  readonly windowMs: number;

  constructor(windowMs: number, frames?: FrameScheduler) {
    this.windowMs = windowMs;
    this.batcher = new FrameBatcher((keys) => {
      for (const k of keys) for (const l of this.listeners.get(k) ?? []) l();
    }, frames);
  }

  get(key: string): Rolling {
    let r = this.data.get(key);
    if (!r) {
      r = { x: [], y: [] };
      this.data.set(key, r);
    }
    return r;
  }

  /** Add one point (ignored unless newer than the last); drops what fell out of the window. */
  push(key: string, x: number, y: number | null): void {
    const r = this.get(key);
    if (r.x.length && x <= r.x[r.x.length - 1]) return;
    r.x.push(x);
    r.y.push(y);
    const cutoff = x - this.windowMs;
    let drop = 0;
    while (drop < r.x.length && r.x[drop] < cutoff) drop++;
    if (drop) {
      r.x.splice(0, drop);
      r.y.splice(0, drop);
    }
    this.batcher.mark(key);
  }

  /** Replace a key's history (the first fetch). Later pushes append after it. */
  seed(key: string, xs: number[], ys: (number | null)[]): void {
    const r = this.get(key);
    const keepAfter = xs.length ? xs[xs.length - 1] : -Infinity;
    const tailX: number[] = [];
    const tailY: (number | null)[] = [];
    r.x.forEach((x, i) => {
      if (x > keepAfter) {
        tailX.push(x);
        tailY.push(r.y[i]);
      }
    });
    r.x = [...xs, ...tailX];
    r.y = [...ys, ...tailY];
    this.batcher.mark(key);
  }

  subscribe(key: string, listener: () => void): () => void {
    let set = this.listeners.get(key);
    if (!set) {
      set = new Set();
      this.listeners.set(key, set);
    }
    set.add(listener);
    return () => set.delete(listener);
  }

  dispose(): void {
    this.batcher.dispose();
  }
}
