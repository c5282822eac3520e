import { act, renderHook } from "@testing-library/react";
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import type { RunMetrics } from "../api/types";
import { useMetricsLoader } from "../charts/loader";
import { SeriesStore } from "../charts/series";
import { elapse, wire } from "../test/streams";
import { usePushedSummaries } from "./Compare";

function metrics(run: string, x: number[]): RunMetrics {
  const v = x.map((s) => 1 / (1 + s));
  return { run_id: run, x_axis: "step", resolution: "raw", width: 1, x,
    series: { loss: { min: v, max: v, avg: v, last: v, count: x.map(() => 1), nan: x.map(() => 0) } } } as RunMetrics;
}

const CHART = /^(GET \/api\/v1\/runs\/run_[ab]\/metrics(\?|$)|POST \/api\/v1\/runs\/metrics:query)/;
const SUMMARY = /^GET \/api\/v1\/runs\/run_[ab]\/summary$/;
const STREAMS = /\/runs\/(metrics|[^/]+\/metrics)\/stream$/;

/** Compare's live half: the charts' loader and the summaries beside them, as the page wires them. */
function useLiveCompare(store: SeriesStore, live: string[]) {
  const pushed = usePushedSummaries(live);
  useMetricsLoader({ store, runs: live, x: "step", zoom: null, live, pollMs: 1000, onPoints: pushed.onPoints,
    onStreamState: pushed.onStreamState });
  return pushed.fresh;
}

describe("Compare's live runs", () => {
  beforeEach(() => vi.useFakeTimers({ toFake: ["setTimeout", "clearTimeout", "setInterval", "clearInterval", "Date"] }));
  afterEach(() => {
    vi.useRealTimers();
    vi.unstubAllGlobals();
  });

  it("follow one stream for them all: nothing asked on a timer while it is up, polled only while it is down", async () => {
    let last = 10;
    const w = wire(STREAMS, (path, _url, body) => {
      if (path.endsWith("/summary")) return { summary: { run_id: path.split("/")[4], metrics: {} } };
      if (path === "/api/v1/runs/metrics:query") return { runs: (body as { run_ids: string[] }).run_ids.map((id) => metrics(id, [0, last])) };
      return metrics(path.split("/")[4], [last]);
    });
    const store = new SeriesStore();
    const live = ["run_a", "run_b"];
    const { result, unmount } = renderHook(() => useLiveCompare(store, live));
    const advance = (ms: number) => elapse(ms, act);
    await advance(0);
    expect(w.streams.map((s) => s.path)).toEqual(["/api/v1/runs/metrics/stream?run_ids=run_a%2Crun_b"]);
    w.streams[0].send("ready", { seq: 0 }, "e-0");
    await advance(2000);
    const charted = w.count(CHART);

    // Up and quiet: no request at all, for a minute.
    await advance(60_000);
    expect([w.count(CHART), w.count(SUMMARY)]).toEqual([charted, 0]);

    // Points of run_b: its tail and its summary, asked once each; run_a is left alone.
    last = 20;
    w.streams[0].send("points", { run_id: "run_b", seq: 1, series: {} }, "e-1");
    w.streams[0].send("points", { run_id: "run_b", seq: 2, series: {} }, "e-2");
    await advance(500);
    const tails = w.calls.filter((c) => CHART.test(c)).slice(charted);
    expect(tails[0]).toBe("GET /api/v1/runs/run_b/metrics?x=step&points=1000&start=10");
    expect(tails.every((c) => c.startsWith("GET /api/v1/runs/run_b/metrics?")) && tails.length <= 2).toBe(true);
    expect(w.calls.filter((c) => SUMMARY.test(c))).toEqual(["GET /api/v1/runs/run_b/summary"]); // the burst: one now...
    await advance(5000);
    expect(w.count(SUMMARY)).toBe(2); // ...and one after the throttle's period, for the rest of the burst
    expect(result.current.get("run_b")?.run_id).toBe("run_b");
    expect(store.lastX("run_b")).toBe(20);

    // Down: both runs' charts and summaries are polled.
    const before = { chart: w.count(CHART), summary: w.count(SUMMARY) };
    w.refuse = true;
    w.streams[0].end();
    await advance(31_000);
    expect(w.count(CHART) - before.chart).toBeGreaterThanOrEqual(2 * 20);
    expect(w.calls.slice(-200).some((c) => c === "GET /api/v1/runs/run_a/summary")).toBe(true);
    expect(w.count(SUMMARY) - before.summary).toBeGreaterThanOrEqual(4); // every 15 s, for each run

    // Back: polling stops once it is open again.
    w.refuse = false;
    await advance(35_000);
    expect(w.streams.length).toBe(2);
    w.streams[1].send("ready", { seq: 2 }, "e-2");
    await advance(2000);
    const back = { chart: w.count(CHART), summary: w.count(SUMMARY) };
    await advance(60_000);
    expect({ chart: w.count(CHART), summary: w.count(SUMMARY) }).toEqual(back);
    unmount();
  });

  it("follow one live run on its own stream", async () => {
    const w = wire(STREAMS, (path) => metrics(path.split("/")[4], [1]));
    const live = ["run_a"];
    const store = new SeriesStore();
    renderHook(() => useLiveCompare(store, live));
    await elapse(0, act);
    expect(w.streams.map((s) => s.path)).toEqual(["/api/v1/runs/run_a/metrics/stream"]);
  });
});
