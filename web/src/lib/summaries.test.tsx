import { act, renderHook } from "@testing-library/react";
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { changes } from "../api/changes";
import { elapse, wire } from "../test/streams";
import { useSummaries } from "./summaries";

describe("useSummaries of running runs", () => {
  beforeEach(() => vi.useFakeTimers({ toFake: ["setTimeout", "clearTimeout", "setInterval", "clearInterval", "Date"] }));
  afterEach(() => {
    changes.close();
    vi.useRealTimers();
    vi.unstubAllGlobals();
  });

  const SUMMARY = /^GET \/api\/v1\/runs\/rn_live\/summary/;
  const advance = (ms: number) => elapse(ms, act);

  it("are asked again on a runs change (at most every refreshMs), never on a timer while the stream is up", async () => {
    let step = 1;
    const w = wire(/\/changes\/stream$/, (path) => ({ summary: { run_id: path.split("/")[4], metrics: {}, progress: { step } } }));
    const ids = ["rn_live", "rn_done"];
    const running = ["rn_live"];
    const { result, unmount } = renderHook(() => useSummaries(ids, running, 5000));
    await advance(0);
    expect(w.count(SUMMARY)).toBe(1);
    w.streams[0].send("ready", { topics: ["jobs", "runs"] });
    await advance(0);
    expect(w.count(SUMMARY)).toBe(2);
    await advance(60_000);
    expect(w.count(SUMMARY)).toBe(2); // up and nothing changed: nothing asked

    step = 7;
    w.streams[0].send("changes", { topics: ["jobs"] });
    await advance(0);
    expect(w.count(SUMMARY)).toBe(2); // not its topic
    w.streams[0].send("changes", { topics: ["runs"] });
    await advance(0);
    expect(w.count(SUMMARY)).toBe(3);
    expect(result.current.get("rn_live")?.progress.step).toBe(7);
    expect(w.count(/rn_done/)).toBe(1); // an ended run's summary is not asked again

    await advance(10_000);
    const visibility = vi.spyOn(document, "visibilityState", "get").mockReturnValue("hidden");
    for (let i = 0; i < 4; i++) {
      w.streams[0].send("changes", { topics: ["runs"] });
      await advance(6_000);
    }
    expect(w.count(SUMMARY)).toBe(3); // a background tab asks nothing
    visibility.mockReturnValue("visible");
    document.dispatchEvent(new Event("visibilitychange"));
    await advance(0);
    expect(w.count(SUMMARY)).toBe(4); // once on showing, for all four
    visibility.mockRestore();

    w.refuse = true;
    w.streams[0].end();
    await advance(20_000);
    expect(w.count(SUMMARY)).toBeGreaterThanOrEqual(7); // down: every refreshMs
    unmount();
  });
});
