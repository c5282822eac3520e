import { act, cleanup, render, renderHook, waitFor } from "@testing-library/react";
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { ExperimentPanels, RUNS_SETTLE_MS, useSettledRuns, type PanelRunSpec } from "./ExperimentPanels";
import { chunks, Holdings, MAX_STREAMS, nextBatch, pointsFor, TAIL_MIN_MS } from "./panelLoader";
import { fakeWidth, recordCanvas, type CanvasRecorder } from "./testCanvas";

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
const say = (text: string) => stream!.enqueue(new TextEncoder().encode(text));

beforeEach(() => {
  calls = [];
  hold = null;
  stream = null;
  stagger = false;
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
    if (path.endsWith("/metrics/stream")) {
      return new Response(new ReadableStream<Uint8Array>({
        start(controller) {
          if (path === "/api/v1/runs/a/metrics/stream") stream = controller;
          init.signal?.addEventListener("abort", () => controller.error(new DOMException("aborted", "AbortError")));
        },
      }), { status: 200, headers: { "Content-Type": "text/event-stream" } });
    }
    if (path.startsWith("/api/v1/runs/a/metrics?")) {
      // The tail after step 30: the last bucket again and a new one.
      const m = runMetrics("a", ["val/loss"], 0);
      return json({ ...m, x: [30, 40], series: { "val/loss": { min: [4, 5], max: [4, 5], avg: [4, 5], last: [4, 5], count: [1, 1],
        nan: [0, 0] } } });
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

  it("follows a live run by its metric stream: a tail from its last step when points are announced, no timer", async () => {
    const intervals = vi.spyOn(globalThis, "setInterval");
    const { container } = render(<ExperimentPanels runs={runs} metrics={["val/loss"]} x="step" smooth={0}
      zoom={null} onZoom={() => undefined} live={["a"]} groups={false} />);
    const points = () => container.querySelector('.chart-panel[data-metric="val/loss"]')?.getAttribute("data-points");
    await waitFor(() => expect(points()).toBe("4"));
    await waitFor(() => expect(stream).not.toBeNull());
    say("event: points\ndata: {}\n\n");
    await waitFor(() => expect(points()).toBe("5"));
    const tail = calls.find((c) => c.path.startsWith("/api/v1/runs/a/metrics?"))!;
    const query = new URL(tail.path, "http://x").searchParams;
    expect(query.get("start")).toBe("30");
    expect(query.get("names")).toContain("val/loss");
    expect(intervals.mock.calls.filter(([, ms]) => ms === 3000)).toHaveLength(0); // no fallback poll while the stream is up
    intervals.mockRestore();
    // Two more announcements at once: one more tail, no sooner than TAIL_MIN_MS after the last.
    const tails = () => calls.filter((c) => c.path.startsWith("/api/v1/runs/a/metrics?"));
    const before = tails().length;
    say("event: points\ndata: {}\n\n");
    say("event: points\ndata: {}\n\n");
    await waitFor(() => expect(tails().length).toBe(before + 1), { timeout: TAIL_MIN_MS + 1000 });
    expect(tails()[before].at - tails()[before - 1].at).toBeGreaterThanOrEqual(TAIL_MIN_MS - 5);
    await new Promise((r) => setTimeout(r, 100));
    expect(tails().length).toBe(before + 1);
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

describe("live runs", () => {
  it("open one stream a run, kept while the other metrics land one by one", async () => {
    stagger = true;
    const { container } = render(<ExperimentPanels runs={runs} metrics={["val/loss", "acc", "lr", "gn"]} x="step" smooth={0}
      zoom={null} onZoom={() => undefined} live={["a"]} groups={false} />);
    await waitFor(() => expect(container.querySelector(".viz-panels")?.getAttribute("data-loaded")).toBe("4"));
    await waitFor(() => expect(stream).not.toBeNull());
    expect(calls.filter((c) => c.path.endsWith("/metrics/stream"))).toHaveLength(1);
  });
});

describe("many live runs", () => {
  it("opens at most MAX_STREAMS metric streams and polls the other live runs (no connection left for them)", async () => {
    const many: PanelRunSpec[] = Array.from({ length: MAX_STREAMS + 2 }, (_, i) => ({ id: `r${i}`, label: `r${i}`, color: "#123456" }));
    const intervals = vi.spyOn(globalThis, "setInterval");
    const { container } = render(<ExperimentPanels runs={many} metrics={["val/loss"]} x="step" smooth={0} zoom={null}
      onZoom={() => undefined} live={many.map((r) => r.id)} groups={false} />);
    await waitFor(() => expect(container.querySelector(".viz-panels")?.getAttribute("data-loaded")).toBe("1"));
    await waitFor(() => expect(calls.filter((c) => c.path.endsWith("/metrics/stream")).length).toBe(MAX_STREAMS));
    expect(intervals.mock.calls.filter(([, ms]) => ms === 3000)).toHaveLength(2);
    intervals.mockRestore();
  });
});

describe("the runs the panels draw", () => {
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
