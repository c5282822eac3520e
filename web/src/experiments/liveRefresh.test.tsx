import { act, renderHook } from "@testing-library/react";
import { afterEach, describe, expect, it, vi } from "vitest";
import { REFRESH_MS, concernsRuns, useLiveRefresh } from "./liveRefresh";

describe("useLiveRefresh", () => {
  afterEach(() => vi.useRealTimers());

  it("reloads the table when a live run's points arrive, at most once per REFRESH_MS", () => {
    vi.useFakeTimers();
    const reload = vi.fn();
    const { result } = renderHook(() => useLiveRefresh(new Set(["run_a"]), false, reload));
    act(() => result.current()); // the first points: at once
    expect(reload).toHaveBeenCalledTimes(1);
    for (let i = 0; i < 20; i++) act(() => result.current()); // a burst: folded into one at the window's end
    expect(reload).toHaveBeenCalledTimes(1);
    act(() => { vi.advanceTimersByTime(REFRESH_MS); });
    expect(reload).toHaveBeenCalledTimes(2);
    act(() => { vi.advanceTimersByTime(REFRESH_MS * 3); }); // nothing more asked: nothing more loaded
    expect(reload).toHaveBeenCalledTimes(2);
  });

  it("counts an event about a shown run, or any run starting, and nothing else", () => {
    const shown = new Set(["run_a"]);
    expect(concernsRuns({ type: "RUN_ENDED", run_id: "run_a" } as never, shown)).toBe(true);
    expect(concernsRuns({ type: "RUN_ENDED", run_id: "run_b" } as never, shown)).toBe(false);
    expect(concernsRuns({ type: "RUN_STARTED", run_id: "run_b" } as never, shown)).toBe(true);
  });
});
