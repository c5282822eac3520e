import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { throttle } from "./throttle";

describe("throttle", () => {
  beforeEach(() => vi.useFakeTimers());
  afterEach(() => vi.useRealTimers());

  it("calls at once, folds a burst into one call at the window's end, and is cancelled", () => {
    const fn = vi.fn();
    const t = throttle(fn, 2000);
    t.call();
    expect(fn).toHaveBeenCalledTimes(1);
    for (let i = 0; i < 10; i++) {
      vi.advanceTimersByTime(100);
      t.call();
    }
    expect(fn).toHaveBeenCalledTimes(1);
    vi.advanceTimersByTime(1000);
    expect(fn).toHaveBeenCalledTimes(2); // 2 s after the first
    vi.advanceTimersByTime(5000);
    t.call();
    expect(fn).toHaveBeenCalledTimes(3); // a quiet window: at once again
    t.call();
    t.cancel();
    vi.advanceTimersByTime(5000);
    expect(fn).toHaveBeenCalledTimes(3);
  });
});
