import { act, cleanup, render, renderHook, waitFor } from "@testing-library/react";
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { ExperimentPanels, RUNS_SETTLE_MS, useSettledRuns, type PanelRunSpec } from "./ExperimentPanels";
import { chunks, Holdings, LIVE_REDRAW_MS, nextBatch, pointsFor, REDRAW_MS, usePanelsLoader } from "./panelLoader";
import { fakeWidth, recordCanvas, type CanvasRecorder } from "./testCanvas";
import { RunHighlight } from "../../charts/highlight";
import { brushDrag } from "./brushDrag";
import { DIMMED_ALPHA } from "../../charts/MetricPanel";

function json(body: unknown) {
  return new Response(JSON.stringify(body), { status: 200, headers: { "Content-Type": "application/json" } });
}

// A run's metrics as the daemon answers them: 4 buckets of each asked name.
function runMetrics(runId: string, names: string[], offset: number) {
  const series = Object.fromEntries(names.map((n) => {
    const avg = [1, 2, 3, 4].map((v) => v + offset);
    return [n, { min: avg, max: avg, avg, last: avg, count: [1, 1, 1, 1], nan: [0, 0, 0, 0] }];
  }));
  return { run_id: runId, x_axis: "step", resolution: "raw", width: 1, x: [0, 10, 20, 30], series };
}

interface Call {
  path: string;
  at: number;
  body: { run_ids?: string[]; names?: string[]; points?: number } | null;
}

let calls: Call[];
let canvas: CanvasRecorder;
let restoreWidth: () => void;
let hold: Promise<void> | null;
let stream: ReadableStreamDefaultController<Uint8Array> | null;
let stagger: boolean; // metric replies land 40 ms apart, in the order asked
let refuse: boolean; // the several-run stream answers 503 (down: reconnecting)
const say = (text: string) => stream!.enqueue(new TextEncoder().encode(text));

beforeEach(() => {
  calls = [];
  hold = null;
  stream = null;
  stagger = false;
  refuse = false;
  canvas = recordCanvas();
  restoreWidth = fakeWidth(500);
  vi.stubGlobal("fetch", vi.fn(async (url: string, init: RequestInit) => {
    const path = String(url);
    const body = init.body ? JSON.parse(String(init.body)) : null;
    calls.push({ path, body, at: performance.now() });
    if (hold) await hold;
    if (path === "/api/v1/runs/metrics:query") {
      if (stagger) await new Promise((r) => setTimeout(r, 40 * calls.filter((c) => c.path === path).length));
      return json({ runs: body.run_ids.map((id: string, i: number) => runMetrics(id, body.names, i * 10)) });
    }
    if (path.startsWith("/api/v1/runs/metrics/stream?")) {
      if (refuse) return new Response("{}", { status: 503 });
      return new Response(new ReadableStream<Uint8Array>({
        start(controller) {
          stream = controller;
          init.signal?.addEventListener("abort", () => controller.error(new DOMException("aborted", "AbortError")));
        },
      }), { status: 200, headers: { "Content-Type": "text/event-stream" } });
    }
    const read = /^\/api\/v1\/runs\/([^/]+)\/metrics\?/.exec(path);
    if (read) {
      const query = new URL(path, "http://x").searchParams;
      const names = query.get("names")!.split(",");
      const m = runMetrics(read[1], names, 0);
      if (query.get("start") === null) return json(m); // a fresh overview: steps 0..30
      // The tail after step 30: the last bucket again and a new one.
      const tail = { min: [4, 5], max: [4, 5], avg: [4, 5], last: [4, 5], count: [1, 1], nan: [0, 0] };
      return json({ ...m, x: [30, 40], series: Object.fromEntries(names.map((n) => [n, tail])) });
    }
    if (path.startsWith("/api/v1/events")) {
      const run = new URL(path, "http://x").searchParams.get("run_id");
      return json({ next_cursor: null, events: run === "a" ? [{ id: "ev_1", ts: 5, type: "NAN_LOSS", severity: "critical", step: 20,
        run_id: "a", job_id: null, node_id: null, message: "loss is NaN", data: {} }] : [] });
    }
    return new Response("{}", { status: 404 });
  }));
});
afterEach(() => {
  cleanup(); // unmount before the canvas stand-ins go
  vi.unstubAllGlobals();
  canvas.uninstall();
  restoreWidth();
});

const runs: PanelRunSpec[] = [
  { id: "a", label: "run a", color: "#ff0000", group: "adam" },
  { id: "b", label: "run b", color: "#00ff00", group: "adam" },
  { id: "c", label: "run c", color: "#0000ff", group: "sgd" },
];
const metricQueries = () => calls.filter((c) => c.path === "/api/v1/runs/metrics:query");

describe("the panels' loading plan", () => {
  it("asks for the metrics in view first, then all the others, and only for the runs they lack", () => {
    const all = ["loss", "acc", "lr", "gn"];
    const h = new Holdings();
    expect(nextBatch(all, ["a", "b"], h, new Set(["acc", "lr"]))).toEqual({ metrics: ["acc", "lr"], runs: ["a", "b"] });
    h.start(["acc", "lr"], ["a", "b"]);
    expect(nextBatch(all, ["a", "b"], h, new Set(["acc", "lr"]))).toEqual({ metrics: ["loss", "gn"], runs: ["a", "b"] });
    h.done(["acc", "lr"], ["a", "b"], true);
    h.start(["loss", "gn"], ["a", "b"]);
    h.done(["loss", "gn"], ["a", "b"], true);
    expect(nextBatch(all, ["a", "b"], h, new Set())).toEqual({ metrics: [], runs: [] });
    // A brush narrows the runs: nothing to fetch. A new run: only that run.
    expect(nextBatch(all, ["b"], h, new Set(["acc"])).metrics).toEqual([]);
    expect(nextBatch(all, ["b", "c"], h, new Set(["acc"]))).toEqual({ metrics: ["acc"], runs: ["c"] });
    // A failed fetch is asked for again.
    h.start(["acc"], ["c"]);
    h.done(["acc"], ["c"], false);
    expect(nextBatch(all, ["c"], h, new Set(["acc"]))).toEqual({ metrics: ["acc"], runs: ["c"] });
  });

  it("asks fewer points per run the more runs a panel overlays", () => {
    expect(pointsFor(3)).toBe(400);
    expect(pointsFor(50)).toBe(240);
    expect(pointsFor(1000)).toBe(100);
  });

  it("splits runs into queries of at most 50", () => {
    const ids = Array.from({ length: 120 }, (_, i) => `r${i}`);
    expect(chunks(ids, 50).map((c) => c.length)).toEqual([50, 50, 20]);
  });
});

describe("ExperimentPanels", () => {
  it("stresses the run the page points at on every line chart, the others dimmed, without a render", async () => {
    const highlight = new RunHighlight();
    const { container } = render(<ExperimentPanels runs={runs} metrics={["val/loss", "acc"]} x="step" smooth={0}
      zoom={null} onZoom={() => undefined} live={[]} groups={false} highlight={highlight} />);
    await waitFor(() => expect(container.querySelector('.chart-panel[data-metric="acc"]')?.getAttribute("data-points")).toBe("4"));
    const dimmed = () => canvas.calls.filter((c) => c.op === "set:globalAlpha" && c.args[0] === DIMMED_ALPHA).length;
    const before = dimmed();
    await act(async () => highlight.set("b")); // hovered on the parallel coordinates (uPlot redraws in a microtask)
    await waitFor(() => expect(dimmed()).toBeGreaterThan(before));
    const stressed = dimmed();
    await act(async () => highlight.set(null));
    const cleared = canvas.calls.length;
    await act(async () => highlight.set(null)); // the same again: nothing to draw
    expect(canvas.calls.length).toBe(cleared);
    expect(dimmed()).toBe(stressed); // back to all as drawn: nothing dimmed since
  });

  it("draws a panel per metric, the primary first and starred, every run overlaid, then marks the runs' events", async () => {
    const { container } = render(<ExperimentPanels runs={runs} metrics={["val/loss", "acc"]} primary="val/loss" x="step" smooth={0}
      zoom={null} onZoom={() => undefined} live={[]} groups={false} />);
    await waitFor(() => expect(container.querySelector(".viz-panels")?.getAttribute("data-loaded")).toBe("2"));
    const titles = [...container.querySelectorAll(".chart-panel")].map((p) => p.getAttribute("data-metric"));
    expect(titles).toEqual(["val/loss", "acc"]);
    expect(container.querySelector('.chart-panel[data-metric="val/loss"] .viz-star')).not.toBeNull();
    expect(container.querySelector('.chart-panel[data-metric="acc"] .viz-star')).toBeNull();
    // One query per metric for the three runs, the primary first (no observer in jsdom: all panels count as in view).
    expect(metricQueries().map((c) => c.body)).toEqual([{ run_ids: ["a", "b", "c"], names: ["val/loss"], x: "step", points: 400 },
      { run_ids: ["a", "b", "c"], names: ["acc"], x: "step", points: 400 }]);
    await waitFor(() => expect(container.querySelector('.chart-panel[data-metric="acc"]')?.getAttribute("data-points")).toBe("4"));
    // Events are read once the first charts are in, per run, and the critical one is drawn: a dashed line in run a's colour.
    await waitFor(() => expect(calls.filter((c) => c.path.startsWith("/api/v1/events")).length).toBe(3));
    await waitFor(() => expect(canvas.calls.some((c) => c.op === "setLineDash" && (c.args[0] as number[]).length === 2)).toBe(true));
  });

  it("asks for the first metric alone, then the others together once it is in", async () => {
    let release!: () => void;
    hold = new Promise((r) => (release = r));
    const { container } = render(<ExperimentPanels runs={runs} metrics={["val/loss", "acc", "lr"]} primary="val/loss" x="step"
      smooth={0} zoom={null} onZoom={() => undefined} live={[]} groups={false} />);
    await waitFor(() => expect(metricQueries()).toHaveLength(1));
    await new Promise((r) => setTimeout(r, 50));
    expect(metricQueries().map((c) => c.body!.names)).toEqual([["val/loss"]]);
    hold = null;
    release();
    await waitFor(() => expect(metricQueries()).toHaveLength(3));
    expect(metricQueries().slice(1).map((c) => c.body!.names)).toEqual([["acc"], ["lr"]]);
    await waitFor(() => expect(container.querySelector(".viz-panels")?.getAttribute("data-loaded")).toBe("3"));
  });

  it("loads the panels in view before the others", async () => {
    const observers: { cb: IntersectionObserverCallback; nodes: Element[] }[] = [];
    vi.stubGlobal("IntersectionObserver", class {
      nodes: Element[] = [];
      constructor(cb: IntersectionObserverCallback) {
        observers.push({ cb, nodes: this.nodes });
      }
      observe(n: Element) { this.nodes.push(n); }
      disconnect() {}
    });
    let release!: () => void;
    hold = new Promise((r) => (release = r));
    const { container } = render(<ExperimentPanels runs={runs} metrics={["val/loss", "acc", "lr"]} x="step" smooth={0}
      zoom={null} onZoom={() => undefined} live={[]} groups={false} />);
    expect(metricQueries()).toHaveLength(0); // nothing until the panels say where they are
    for (const o of observers) {
      const metric = o.nodes[0].getAttribute("data-metric");
      o.cb([{ isIntersecting: metric === "acc", target: o.nodes[0] } as unknown as IntersectionObserverEntry], o as never);
    }
    await waitFor(() => expect(metricQueries()).toHaveLength(1));
    expect(metricQueries()[0].body!.names).toEqual(["acc"]);
    release();
    await waitFor(() => expect(metricQueries()).toHaveLength(3));
    expect(metricQueries().slice(1).map((c) => c.body!.names)).toEqual([["val/loss"], ["lr"]]);
    await waitFor(() => expect(container.querySelector(".viz-panels")?.getAttribute("data-loaded")).toBe("3"));
  });

  it("draws one band per group when grouped, in the group's first run's colour", async () => {
    const { container } = render(<ExperimentPanels runs={runs} metrics={["val/loss"]} x="step" smooth={0}
      zoom={null} onZoom={() => undefined} live={[]} groups />);
    const panel = () => container.querySelector(".viz-band-panel");
    await waitFor(() => expect(panel()?.getAttribute("data-points")).toBe("4"));
    expect(panel()!.getAttribute("data-groups")).toBe("2");
    // The mean lines are stroked in the groups' colours; run b (in group adam) has no line of its own.
    const strokes = canvas.calls.filter((c) => c.op === "set:strokeStyle").map((c) => c.args[0]);
    expect(strokes).toEqual(expect.arrayContaining(["#ff0000", "#0000ff"]));
    expect(strokes).not.toContain("#00ff00");
  });

  it("fetches nothing when the runs narrow (a brush) and only the added run when one joins", async () => {
    const props = { metrics: ["val/loss"], x: "step" as const, smooth: 0, zoom: null, onZoom: () => undefined, live: [], groups: false };
    const { container, rerender } = render(<ExperimentPanels runs={runs.slice(0, 2)} {...props} />);
    const loaded = () => container.querySelector(".viz-panels")?.getAttribute("data-loaded");
    await waitFor(() => expect(loaded()).toBe("1"));
    rerender(<ExperimentPanels runs={runs.slice(0, 1)} {...props} />);
    await waitFor(() => expect(container.querySelector(".chart-panel")?.classList.contains("multi")).toBe(false)); // one run drawn
    expect(metricQueries()).toHaveLength(1);
    rerender(<ExperimentPanels runs={runs} {...props} />);
    await waitFor(() => expect(metricQueries()).toHaveLength(2));
    await waitFor(() => expect(loaded()).toBe("1"));
    expect(metricQueries().map((c) => c.body!.run_ids)).toEqual([["a", "b"], ["c"]]);
  });
});

const streamCalls = () => calls.filter((c) => c.path.startsWith("/api/v1/runs/metrics/stream?"));
const reads = () => calls.filter((c) => /^\/api\/v1\/runs\/[^/]+\/metrics\?/.test(c.path));
const batch = (run: string, seq: number, steps: number[], values: (number | null)[], nonfinite?: Record<string, number[]>) =>
  `event: points\nid: 0000abcd-${seq}\ndata: ${JSON.stringify({ run_id: run, seq,
    series: { "val/loss": { step: steps, ts: steps.map((s) => 1000 + s), value: values, ...(nonfinite ? { nonfinite } : {}) } } })}\n\n`;
const eight: PanelRunSpec[] = Array.from({ length: 8 }, (_, i) => ({ id: `r${i}`, label: `r${i}`, color: "#123456" }));

describe("live runs", () => {
  it("are followed on one stream, read once on ready, and ask nothing more while it is up and quiet", async () => {
    stagger = true;
    const intervals = vi.spyOn(globalThis, "setInterval");
    const onPoints = vi.fn();
    const { container } = render(<ExperimentPanels runs={eight} metrics={["val/loss", "acc"]} x="step" smooth={0} zoom={null}
      onZoom={() => undefined} live={eight.map((r) => r.id)} groups={false} onPoints={onPoints} />);
    await waitFor(() => expect(container.querySelector(".viz-panels")?.getAttribute("data-loaded")).toBe("2"));
    await waitFor(() => expect(stream).not.toBeNull());
    expect(streamCalls()).toHaveLength(1); // kept open while the second metric landed
    const q = new URL(streamCalls()[0].path, "http://x").searchParams;
    expect(q.get("run_ids")).toBe("r0,r1,r2,r3,r4,r5,r6,r7");
    expect(q.get("names")).toBe("val/loss,acc");
    say("event: ready\ndata: {}\n\n");
    await waitFor(() => expect(reads()).toHaveLength(8)); // each live run's series read again once
    expect(reads().every((c) => !new URL(c.path, "http://x").searchParams.has("start"))).toBe(true);
    const before = calls.length;
    await new Promise((r) => setTimeout(r, 300));
    expect(calls.length).toBe(before);
    expect(intervals.mock.calls.filter(([, ms]) => ms === 3000)).toHaveLength(0); // no polling while the stream is up
    intervals.mockRestore();
    // Points land from the event itself: drawn, the page told, and no metrics request (the marks' events are read again).
    const points = () => container.querySelector('.chart-panel[data-metric="val/loss"]')?.getAttribute("data-points");
    expect(points()).toBe("4");
    say(batch("r3", 7, [40, 41], [5, 6]));
    await waitFor(() => expect(points()).toBe("6"));
    expect(onPoints).toHaveBeenCalledTimes(1);
    expect(calls.slice(before).filter((c) => !c.path.startsWith("/api/v1/events"))).toEqual([]);
  });

  it("take the points from the events into the runs' series, each batch and point once, on the overview's buckets", async () => {
    const { result } = renderHook(() => usePanelsLoader({ runs: ["a", "b"], metrics: ["val/loss"], x: "step", zoom: null,
      live: ["a", "b"] }));
    await waitFor(() => expect(stream).not.toBeNull());
    say("event: ready\ndata: {}\n\n");
    await waitFor(() => expect(reads()).toHaveLength(2));
    const col = () => result.current.store("val/loss").columns("a", "val/loss")!;
    await waitFor(() => expect(col().x).toEqual([0, 10, 20, 30]));
    say(batch("a", 3, [30, 31, 32], [9, 5, 6])); // step 30 is in the read already
    await waitFor(() => expect(col().x).toEqual([0, 10, 20, 30, 31, 32]));
    expect(col().val.slice(4)).toEqual([5, 6]);
    say(batch("a", 3, [33], [7])); // the same batch again (a resume): ignored
    say(batch("a", 4, [32, 33, 34], [6, 7, null], { NaN: [2] })); // step 32 sent twice; a NaN is kept as a gap
    await waitFor(() => expect(col().x).toEqual([0, 10, 20, 30, 31, 32, 33, 34]));
    expect(col().val.slice(4)).toEqual([5, 6, 7, null]);
    expect(result.current.store("val/loss").columns("b", "val/loss")!.x).toEqual([0, 10, 20, 30]);
    expect(reads()).toHaveLength(2);
    // A reset reads every run's series again.
    say("event: reset\ndata: {}\n\n");
    await waitFor(() => expect(reads()).toHaveLength(4));
    await waitFor(() => expect(col().x).toEqual([0, 10, 20, 30]));
  });

  it("redraw at most every LIVE_REDRAW_MS while followed", async () => {
    const { result } = renderHook(() => usePanelsLoader({ runs: ["a"], metrics: ["val/loss"], x: "step", zoom: null, live: ["a"] }));
    await waitFor(() => expect(stream).not.toBeNull());
    say("event: ready\ndata: {}\n\n");
    await waitFor(() => expect(reads()).toHaveLength(1));
    const s = result.current.store("val/loss");
    await new Promise((r) => setTimeout(r, LIVE_REDRAW_MS + 50)); // the read's redraw is done
    const drawn = s.flushes;
    say(batch("a", 1, [31], [1]));
    await waitFor(() => expect(s.flushes).toBe(drawn + 1));
    const at = performance.now();
    say(batch("a", 2, [32], [1]));
    await waitFor(() => expect(s.flushes).toBe(drawn + 2), { timeout: LIVE_REDRAW_MS + 500 });
    expect(performance.now() - at).toBeGreaterThan(REDRAW_MS + 100);
  });

  it("poll with a tail read only while the stream is down", async () => {
    refuse = true;
    renderHook(() => usePanelsLoader({ runs: ["a"], metrics: ["val/loss"], x: "step", zoom: null, live: ["a"], pollMs: 40 }));
    await waitFor(() => expect(reads().length).toBeGreaterThanOrEqual(2));
    expect(new URL(reads()[0].path, "http://x").searchParams.get("start")).toBe("30");
    refuse = false; // the stream's retry (after its backoff) gets through: polling stops
    await waitFor(() => expect(stream).not.toBeNull(), { timeout: 3000 });
    await new Promise((r) => setTimeout(r, 60));
    const polled = reads().length;
    await new Promise((r) => setTimeout(r, 200));
    expect(reads().length).toBe(polled);
  });

  it("go on several streams only past MAX_FOLLOWED runs (a browser holds six connections)", async () => {
    const many: PanelRunSpec[] = Array.from({ length: 70 }, (_, i) => ({ id: `r${i}`, label: `r${i}`, color: "#123456" }));
    const { container } = render(<ExperimentPanels runs={many} metrics={["val/loss"]} x="step" smooth={0} zoom={null}
      onZoom={() => undefined} live={many.map((r) => r.id)} groups={false} />);
    await waitFor(() => expect(container.querySelector(".viz-panels")?.getAttribute("data-loaded")).toBe("1"));
    await waitFor(() => expect(streamCalls()).toHaveLength(2));
    expect(streamCalls().map((c) => new URL(c.path, "http://x").searchParams.get("run_ids")!.split(",").length)).toEqual([64, 6]);
  });
});

describe("the runs the panels draw", () => {
  it("wait for a brush drag to end before they take a new set (no chart rebuilt under the drag)", () => {
    vi.useFakeTimers();
    try {
      const { result, rerender } = renderHook(({ r }) => useSettledRuns(r), { initialProps: { r: runs } });
      const first = result.current;
      brushDrag.start();
      rerender({ r: runs.slice(0, 2) }); // the page told of the brush at a rest, mid-drag
      act(() => vi.advanceTimersByTime(RUNS_SETTLE_MS * 10));
      expect(result.current).toBe(first);
      brushDrag.end();
      act(() => vi.advanceTimersByTime(RUNS_SETTLE_MS - 1));
      expect(result.current).toBe(first);
      act(() => vi.advanceTimersByTime(1));
      expect(result.current.map((r) => r.id)).toEqual(["a", "b"]);
    } finally {
      if (brushDrag.active) brushDrag.end();
      vi.useRealTimers();
    }
  });

  it("follow a new set only once it holds still (a brush drag), and keep their identity for the same set", () => {
    vi.useFakeTimers();
    try {
      const { result, rerender } = renderHook(({ r }) => useSettledRuns(r), { initialProps: { r: runs } });
      const first = result.current;
      expect(first.map((r) => r.id)).toEqual(["a", "b", "c"]);
      rerender({ r: runs.map((r) => ({ ...r })) });
      expect(result.current).toBe(first); // same content: same object, nothing redrawn
      rerender({ r: runs.slice(0, 2) });
      act(() => vi.advanceTimersByTime(RUNS_SETTLE_MS - 50));
      rerender({ r: runs.slice(0, 1) });
      act(() => vi.advanceTimersByTime(RUNS_SETTLE_MS - 1));
      expect(result.current).toBe(first);
      act(() => vi.advanceTimersByTime(1));
      expect(result.current.map((r) => r.id)).toEqual(["a"]);
    } finally {
      vi.useRealTimers();
    }
  });
});
