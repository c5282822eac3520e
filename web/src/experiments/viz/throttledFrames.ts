// A frame scheduler that lets the panels redraw at most a few times a second: a request
// runs at the first animation frame at least `minMs` after the last one ran. Shared by every
// metric's store, so the panels that changed meanwhile redraw together, in one frame. Eight
// live runs at 100 steps/s announce points 16 times a second; redrawing 8 panels on each
// kept the main thread busy, and nobody reads a chart 16 times a second.

import { animationFrames, type FrameScheduler } from "../../charts/batch";

export interface OneShotTimers {
  set(fn: () => void, ms: number): ReturnType<typeof setTimeout>;
  clear(id: ReturnType<typeof setTimeout>): void;
}

const REAL_TIMERS: OneShotTimers = { set: (fn, ms) => setTimeout(fn, ms), clear: (id) => clearTimeout(id) };

export class ThrottledFrames implements FrameScheduler {
  private last = -Infinity;
  private nextId = 1;
  private readonly pending = new Map<number, { timer?: ReturnType<typeof setTimeout>; frame?: number }>();

  /** `minMs` may change (e.g. slower while only live points land); the next request uses it. */
  constructor(public minMs: number, private readonly now: () => number = () => performance.now(),
    private readonly frames: FrameScheduler = animationFrames, private readonly timers: OneShotTimers = REAL_TIMERS) {}

  request(callback: () => void): number {
    const id = this.nextId++;
    const entry: { timer?: ReturnType<typeof setTimeout>; frame?: number } = {};
    this.pending.set(id, entry);
    const inFrame = () => {
      entry.timer = undefined;
      entry.frame = this.frames.request(() => {
        this.pending.delete(id);
        this.last = this.now();
        callback();
      });
    };
    const wait = this.last + this.minMs - this.now();
    if (wait > 0) entry.timer = this.timers.set(inFrame, wait);
    else inFrame();
    return id;
  }

  cancel(id: number): void {
    const entry = this.pending.get(id);
    if (!entry) return;
    if (entry.timer !== undefined) this.timers.clear(entry.timer);
    if (entry.frame !== undefined) this.frames.cancel(entry.frame);
    this.pending.delete(id);
  }
}
