import { describe, expect, it } from "vitest";
import type { RunMetrics, SeriesColumns } from "../api/types";
import { FrameBatcher, type FrameScheduler } from "./batch";
import { LiveStore } from "./live";
import { panelData } from "./panelData";
import { SeriesStore, toColumns } from "./series";

/** Frames that run only when the test says so. */
function manualFrames() {
  const queue = new Map<number, () => void>();
  let next = 1;
  const frames: FrameScheduler = {
    request: (cb) => {
      queue.set(next, cb);
      return next++;
    },
    cancel: (h) => void queue.delete(h),
  };
  return {
    frames,
    pending: () => queue.size,
    run: () => {
      const cbs = [...queue.values()];
      queue.clear();
      cbs.forEach((cb) => cb());
    },
  };
}

function cols(values: (number | null)[], counts?: number[]): SeriesColumns {
  return { min: values, max: values, avg: values, last: values, count: counts ?? values.map((v) => (v === null ? 0 : 1)),
    nan: values.map(() => 0) };
}

function metrics(run: string, x: number[], series: Record<string, (number | null)[]>, width = 1): RunMetrics {
  return { run_id: run, x_axis: "step", resolution: "raw", width, x,
    series: Object.fromEntries(Object.entries(series).map(([k, v]) => [k, cols(v)])) };
}

describe("FrameBatcher", () => {
  it("flushes once per frame however many marks arrive", () => {
    const f = manualFrames();
    const flushed: string[][] = [];
    const b = new FrameBatcher<string>((keys) => flushed.push([...keys]), f.frames);
    for (let i = 0; i < 1000; i++) b.mark(i % 2 ? "loss" : "acc");
    expect(f.pending()).toBe(1);
    expect(flushed).toEqual([]);
    f.run();
    expect(flushed).toEqual([["acc", "loss"]]);
    expect(b.flushes).toBe(1);
    f.run();
    expect(b.flushes).toBe(1); // nothing new: no flush
    b.mark("loss");
    f.run();
    expect(flushed[1]).toEqual(["loss"]);
  });

  it("drops pending work on dispose", () => {
    const f = manualFrames();
    let n = 0;
    const b = new FrameBatcher<string>(() => n++, f.frames);
    b.mark("x");
    b.dispose();
    f.run();
    expect(n).toBe(0);
  });
});

describe("SeriesStore", () => {
  it("tells each metric's listeners once per frame, with all appends applied", () => {
    const f = manualFrames();
    const store = new SeriesStore(f.frames);
    store.replace("r1", metrics("r1", [0, 1, 2], { loss: [3, 2, 1], acc: [0.1, 0.2, 0.3] }));
    let lossCalls = 0;
    let accCalls = 0;
    store.subscribe("loss", () => lossCalls++);
    store.subscribe("acc", () => accCalls++);
    f.run();
    // 50 live updates (polls or SSE) land before the next frame...
    for (let i = 3; i < 53; i++) store.append("r1", metrics("r1", [i], { loss: [1 / i] }), i);
    expect(lossCalls).toBe(1);
    f.run();
    // ...and the chart is redrawn once, with every point.
    expect(lossCalls).toBe(2);
    expect(accCalls).toBe(1);
    expect(store.columns("r1", "loss")!.x).toHaveLength(53);
    expect(store.lastX("r1")).toBe(52);
  });

  it("replaces the tail from the requested x on (refining the last bucket)", () => {
    const store = new SeriesStore(manualFrames().frames);
    store.replace("r", metrics("r", [0, 100, 200], { loss: [5, 4, 3] }, 100));
    // The bucket at 200 was partial; the tail from 200 on brings it complete plus new points.
    store.append("r", metrics("r", [200, 300], { loss: [2.9, 2] }, 100), 200);
    expect(store.columns("r", "loss")!.x).toEqual([0, 100, 200, 300]);
    expect(store.columns("r", "loss")!.val).toEqual([5, 4, 2.9, 2]);
  });

  it("re-buckets a finer tail onto the overview's grid", () => {
    const store = new SeriesStore(manualFrames().frames);
    store.replace("r", metrics("r", [0, 100, 200], { loss: [5, 4, 3] }, 100));
    // Raw points from 200 on (the partial last bucket and the next one).
    store.append("r", metrics("r", [200, 250, 299, 300, 350], { loss: [3, 2, 1, 6, 8] }, 1), 200);
    const c = store.columns("r", "loss")!;
    expect(c.x).toEqual([0, 100, 200, 300]);
    expect(c.val).toEqual([5, 4, 2, 7]);
    expect(c.min.slice(2)).toEqual([1, 6]);
    expect(c.max.slice(2)).toEqual([3, 8]);
  });

  it("drops empty buckets of sparse metrics and notices new metric names", () => {
    const f = manualFrames();
    const store = new SeriesStore(f.frames);
    let names = 0;
    store.subscribeNames(() => names++);
    store.replace("r", metrics("r", [0, 1, 2, 3], { "eval/loss": [null, 2, null, 1] }));
    f.run();
    expect(names).toBe(1);
    expect(store.columns("r", "eval/loss")!.x).toEqual([1, 3]);
    store.append("r", metrics("r", [4], { "eval/acc": [0.5] }), 4);
    f.run();
    expect(names).toBe(2);
    expect(store.names()).toEqual(["eval/acc", "eval/loss"]);
  });

  it("joins runs with different x for an overlaid panel", () => {
    const store = new SeriesStore(manualFrames().frames);
    store.replace("a", metrics("a", [0, 10], { loss: [1, 2] }));
    store.replace("b", metrics("b", [5, 10], { loss: [3, 4] }));
    const data = panelData(store, "loss", [{ id: "a", label: "a", color: "#000" }, { id: "b", label: "b", color: "#111" }], 0);
    expect(data[0]).toEqual([0, 5, 10]);
    // undefined: this run has no sample at that x (uPlot draws across it), unlike null, a gap.
    expect(data[1]).toEqual([1, undefined, 2]);
    expect(data[3]).toEqual([undefined, 3, 4]);
  });

  it("keeps a run that lacks the metric as an empty series", () => {
    const store = new SeriesStore(manualFrames().frames);
    store.replace("a", metrics("a", [0, 1], { loss: [1, 2] }));
    store.replace("b", metrics("b", [0, 1], { acc: [1, 2] }));
    const data = panelData(store, "loss", [{ id: "a", label: "a", color: "#000" }, { id: "b", label: "b", color: "#111" }], 0.5);
    expect(data).toHaveLength(5);
    expect(data[3]).toEqual([null, null]);
  });

  it("toColumns keeps NaN-only buckets as gaps", () => {
    const c = toColumns([0, 1], { ...cols([null, null], [0, 0]), nan: [1, 0] });
    expect(c.x).toEqual([0]);
    expect(c.val).toEqual([null]);
  });
});

describe("LiveStore", () => {
  it("keeps a time window and batches per frame", () => {
    const f = manualFrames();
    const live = new LiveStore(10_000, f.frames);
    let calls = 0;
    live.subscribe("gpu0", () => calls++);
    for (let t = 0; t <= 20_000; t += 2_000) live.push("gpu0", t, t / 1000);
    live.push("gpu0", 20_000, 99); // not newer: ignored
    f.run();
    expect(calls).toBe(1);
    expect(live.get("gpu0").x[0]).toBe(10_000);
    expect(live.get("gpu0").y.at(-1)).toBe(20);
  });

  it("seeds history under points already pushed", () => {
    const live = new LiveStore(60_000, manualFrames().frames);
    live.push("k", 5_000, 5);
    live.seed("k", [1_000, 2_000, 3_000], [1, 2, 3]);
    expect(live.get("k").x).toEqual([1_000, 2_000, 3_000, 5_000]);
  });
});
