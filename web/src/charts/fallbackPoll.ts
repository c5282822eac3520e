// Polling as a stand-in for a run's metric stream, only while that stream is down: it starts
// when the stream is reconnecting or refused, and stops as soon as the stream is open again
// (or paused with the tab, or closed). While the stream is up nothing here runs on a timer.

import type { StreamState } from "../api/sse";

export interface IntervalTimers {
  set(fn: () => void, ms: number): ReturnType<typeof setInterval>;
  clear(id: ReturnType<typeof setInterval>): void;
}

const REAL_TIMERS: IntervalTimers = { set: (fn, ms) => setInterval(fn, ms), clear: (id) => clearInterval(id) };
const DOWN: ReadonlySet<StreamState> = new Set<StreamState>(["reconnecting", "failed"]);

export class FallbackPoll {
  private timer: ReturnType<typeof setInterval> | null = null;

  constructor(private readonly poke: () => void, private readonly pollMs: number,
    private readonly timers: IntervalTimers = REAL_TIMERS) {}

  /** Give it every state of the stream it stands in for. */
  onState(state: StreamState): void {
    if (DOWN.has(state)) this.start();
    else this.stop();
  }

  get polling(): boolean {
    return this.timer !== null;
  }

  stop(): void {
    if (this.timer !== null) this.timers.clear(this.timer);
    this.timer = null;
  }

  private start(): void {
    if (this.timer !== null) return;
    this.timer = this.timers.set(() => {
      if (typeof document === "undefined" || document.visibilityState !== "hidden") this.poke();
    }, this.pollMs);
  }
}
