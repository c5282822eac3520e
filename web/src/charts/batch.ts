// One flush per animation frame, however many updates arrive in between: producers
// (polls, SSE messages) mark keys dirty; the frame callback hands each dirty key to the
// sink once. This is what keeps live charts from redraw storms.

export interface FrameScheduler {
  request(callback: () => void): number;
  cancel(handle: number): void;
}

export const animationFrames: FrameScheduler = {
  request: (callback) => requestAnimationFrame(() => callback()),
  cancel: (handle) => cancelAnimationFrame(handle),
};

export class FrameBatcher<K> {
  private readonly dirty = new Set<K>();
  private handle: number | null = null;
  private readonly sink: (keys: Set<K>) => void;
  private readonly frames: FrameScheduler;
  flushes = 0;

  constructor(sink: (keys: Set<K>) => void, frames: FrameScheduler = animationFrames) {
    this.sink = sink;
    this.frames = frames;
  }

  mark(key: K): void {
    this.dirty.add(key);
    if (this.handle === null) this.handle = this.frames.request(this.flush);
  }

  private flush = (): void => {
    this.handle = null;
    if (!this.dirty.size) return;
    const keys = new Set(this.dirty);
    this.dirty.clear();
    this.flushes++;
    this.sink(keys);
  };

  dispose(): void {
    if (this.handle !== null) this.frames.cancel(this.handle);
    this.handle = null;
    this.dirty.clear();
  }
}
