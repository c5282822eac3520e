import { act, renderHook } from "@testing-library/react";
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { elapse, wire } from "../test/streams";
import { appendSnapshot, useFollowedNodeMetrics, windowMs } from "./nodeStream";
import type { NodeMetrics, NodeSnapshot } from "./types";

const NAMES = ["gpu*.utilization", "host.cpu_percent"];

function buckets(values: (number | null)[]) {
  return { min: values, max: values, avg: values, last: values, count: values.map((v) => (v === null ? 0 : 1)),
    nan: values.map(() => 0) };
}

function fetched(x: number[], util: (number | null)[]): NodeMetrics {
  return { node_id: "nd_1", start: 0, end: x[x.length - 1] ?? 0, resolution: "raw", width: 2000, x,
    series: { "gpu0.utilization": buckets(util), "host.cpu_percent": buckets(util.map(() => 10)) } };
}

function snapshot(ts: number, util: number, cpu = 20): NodeSnapshot {
  return { ts, backend: "fake", jobs: [], blocked_gpus: [],
    gpus: [{ index: 0, utilization_pct: util, memory_used_mb: 100 }, { index: 1, utilization_pct: util + 1 }] as NodeSnapshot["gpus"],
    host: { cpu_percent: cpu } as NodeSnapshot["host"] };
}

describe("appendSnapshot", () => {
  it("adds the snapshot as one point of every charted series, a GPU seen first included", () => {
    const before = fetched([1000, 3000], [50, 60]);
    const after = appendSnapshot(before, snapshot(5000, 70), NAMES, null);
    expect(after.x).toEqual([1000, 3000, 5000]);
    expect(after.series["gpu0.utilization"].avg).toEqual([50, 60, 70]);
    expect(after.series["gpu0.utilization"].last).toEqual([50, 60, 70]);
    expect(after.series["gpu1.utilization"].avg).toEqual([null, null, 71]); // gpu*: a GPU with no fetched points
    expect(after.series["host.cpu_percent"].avg).toEqual([10, 10, 20]);
    expect(before.x).toEqual([1000, 3000]); // the fetched data is left as it was
  });

  it("ignores a snapshot not newer than the last point, and drops what fell out of the window", () => {
    const before = fetched([1000, 3000], [50, 60]);
    expect(appendSnapshot(before, snapshot(3000, 99), NAMES, null)).toBe(before);
    const after = appendSnapshot(before, snapshot(4500, 70), NAMES, 2000);
    expect(after.x).toEqual([3000, 4500]);
    expect(after.series["gpu0.utilization"].avg).toEqual([60, 70]);
  });

  it("reads a window's length", () => {
    expect([windowMs("15m"), windowMs("1h"), windowMs("7d"), windowMs("soon")]).toEqual([900_000, 3_600_000, 604_800_000, null]);
  });
});

describe("a node's followed charts", () => {
  beforeEach(() => vi.useFakeTimers({ toFake: ["setTimeout", "clearTimeout", "setInterval", "clearInterval", "Date"] }));
  afterEach(() => {
    vi.useRealTimers();
    vi.unstubAllGlobals();
  });

  const METRICS = /^GET \/api\/v1\/nodes\/nd_1\/metrics/;
  const advance = (ms: number) => elapse(ms, act);

  it("grow by the stream's snapshots with no request while it is up, poll only while it is down", async () => {
    const w = wire(/\/nodes\/[^/]+\/stream$/, () => fetched([1000], [50]));
    const span = { window: "1h" };
    const { result, unmount } = renderHook(() => useFollowedNodeMetrics("nd_1", span, NAMES, 1000));
    await advance(0);
    expect(w.count(METRICS)).toBe(1);
    expect(w.streams.map((s) => s.path)).toEqual(["/api/v1/nodes/nd_1/stream"]);

    // Up: each snapshot is one more point, and nothing asks on a timer.
    w.streams[0].send("snapshot", snapshot(3000, 60), "3000");
    await advance(0);
    w.streams[0].send("snapshot", snapshot(5000, 70), "5000");
    await advance(60_000);
    expect(result.current.data?.x).toEqual([1000, 3000, 5000]);
    expect(result.current.data?.series["gpu0.utilization"].avg).toEqual([50, 60, 70]);
    expect(w.count(METRICS)).toBe(1);

    // Down (the daemon ended it and refuses it now): polled every pollMs.
    w.refuse = true;
    w.streams[0].end();
    await advance(5_000);
    const polled = w.count(METRICS);
    expect(polled).toBeGreaterThanOrEqual(4);

    // Back: it reopens (one fetch for what it missed), then nothing more on a timer.
    w.refuse = false;
    await advance(20_000);
    expect(w.streams.length).toBe(2);
    const back = w.count(METRICS);
    await advance(60_000);
    expect(w.count(METRICS)).toBe(back);
    w.streams[1].send("snapshot", snapshot(90_000, 80), "90000");
    await advance(0);
    expect(result.current.data?.x.at(-1)).toBe(90_000);
    unmount();
  });

  it("follow nothing for a span that has ended", async () => {
    const w = wire(/\/nodes\/[^/]+\/stream$/, () => fetched([1000], [50]));
    const span = { start: 0, end: 60_000 };
    renderHook(() => useFollowedNodeMetrics("nd_1", span, NAMES, 1000));
    await advance(60_000);
    expect([w.count(METRICS), w.streams.length]).toEqual([1, 0]);
  });
});
