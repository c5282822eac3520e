// Loading the workspace's panels, visible first: one SeriesStore per metric, so a metric is
// fetched (for every run at once, downsampled by the server) when its panel first shows,
// and the panels out of view follow in one batch after those. Live runs are followed on one
// stream of several runs (GET /runs/metrics/stream?run_ids=) whose events carry the points
// (streamedPoints.ts); polling runs only while that stream is down.

import { useCallback, useEffect, useMemo, useRef, useState } from "react";
import { api, ApiError } from "../../api/client";
import { EventStream } from "../../api/sse";
import type { RunMetrics } from "../../api/types";
import { FallbackPoll } from "../../charts/fallbackPoll";
import { MAX_FOLLOWED, TailQueue } from "../../charts/loader";
import { SeriesStore } from "../../charts/series";
import { LiveBuckets, parseRunPoints, type RunPoints } from "./streamedPoints";
import { ThrottledFrames } from "./throttledFrames";

/** POST /runs/metrics:query takes at most this many runs; more go in several requests at once. */
export const RUNS_PER_QUERY = 50;
/** Points per run and metric: a panel is 400 to 600 px wide, and uPlot builds each line over the union of the runs x values, so more costs every redraw and shows nothing new. */
export const PANEL_POINTS = 400;
/** Points per panel over all its runs: 50 overlaid runs get 240 each (one metric of 50 runs stays under 1 MB of JSON). */
export const PANEL_POINT_BUDGET = 12_000;
/** The panels redraw at most this often as points land (metrics loading one by one)... */
export const REDRAW_MS = 500;
/** ... and at most this often while live runs are followed: 8 panels redrawn twice a second cost about 20 % of the main
 * thread's CPU time (bench ws-follow, 8 runs x 8 metrics at 100 steps/s), once a second 12.6 %; nobody reads a curve faster. */
export const LIVE_REDRAW_MS = 1000;
/** The stream is told the panels' metrics when there are at most this many (the daemon's limit of names); else it sends all. */
export const MAX_STREAM_NAMES = 200;

/** The points to ask per run for `runs` runs overlaid. */
export function pointsFor(runs: number, most = PANEL_POINTS): number {
  return Math.max(100, Math.min(most, Math.floor(PANEL_POINT_BUDGET / Math.max(1, runs))));
}

export interface PanelsLoaderOptions {
  runs: readonly string[];
  metrics: readonly string[];
  x: "step" | "ts";
  zoom: [number, number] | null;
  live: readonly string[];
  points?: number;
  pollMs?: number;
  /** Told when points of a live run land (or a reset says to read its series again). */
  onPoints?: (runId: string) => void;
}

export interface PanelsLoader {
  store: (metric: string) => SeriesStore;
  /** Each panel tells whether it is in view (an IntersectionObserver's report); the metrics seen are loaded first. */
  seen: (metric: string, visible: boolean) => void;
  /** The metrics that hold every run asked for. */
  loaded: ReadonlySet<string>;
  loading: boolean;
  error: ApiError | undefined;
}

/** The runs in chunks the query endpoint takes. */
export function chunks<T>(items: readonly T[], size: number): T[][] {
  const out: T[][] = [];
  for (let i = 0; i < items.length; i += size) out.push(items.slice(i, i + size));
  return out;
}

/** Which (metric, run) pairs are held or on their way, so a change of runs fetches only the runs it adds. */
export class Holdings {
  private readonly held = new Map<string, Set<string>>();
  private readonly busy = new Map<string, Set<string>>();

  has(metric: string, run: string): boolean {
    return this.held.get(metric)?.has(run) ?? false;
  }

  /** Runs of `runs` neither held nor being fetched for `metric`. */
  missing(metric: string, runs: readonly string[]): string[] {
    const held = this.held.get(metric);
    const busy = this.busy.get(metric);
    return runs.filter((r) => !held?.has(r) && !busy?.has(r));
  }

  complete(metric: string, runs: readonly string[]): boolean {
    const held = this.held.get(metric);
    return runs.every((r) => held?.has(r));
  }

  start(metrics: readonly string[], runs: readonly string[]): void {
    for (const m of metrics) for (const r of runs) add(this.busy, m, r);
  }

  done(metrics: readonly string[], runs: readonly string[], ok: boolean): void {
    for (const m of metrics) {
      for (const r of runs) {
        this.busy.get(m)?.delete(r);
        if (ok) add(this.held, m, r);
      }
    }
  }

  clear(): void {
    this.held.clear();
    this.busy.clear();
  }
}

function add(map: Map<string, Set<string>>, key: string, value: string): void {
  let set = map.get(key);
  if (!set) map.set(key, (set = new Set()));
  set.add(value);
}

/** What to fetch next: the metrics in view that lack some run, or else all the others; and the runs they lack. */
export function nextBatch(metrics: readonly string[], runs: readonly string[], holdings: Holdings,
  inView: ReadonlySet<string>): { metrics: string[]; runs: string[] } {
  const need = metrics.filter((m) => holdings.missing(m, runs).length > 0);
  const visible = need.filter((m) => inView.has(m));
  const batch = visible.length ? visible : need;
  const lacking = new Set(batch.flatMap((m) => holdings.missing(m, runs)));
  return { metrics: batch, runs: runs.filter((r) => lacking.has(r)) };
}

/** One metric's part of a fetch, as the store takes it. */
export function only(m: RunMetrics, name: string): RunMetrics {
  return { ...m, series: m.series[name] ? { [name]: m.series[name] } : {} };
}

async function fetchMetrics(runs: readonly string[], names: readonly string[], x: "step" | "ts", zoom: [number, number] | null,
  points: number, signal: AbortSignal): Promise<RunMetrics[]> {
  const range = zoom ? { start: Math.max(0, Math.floor(zoom[0])), end: Math.ceil(zoom[1]) } : {};
  const parts = await Promise.all(chunks(runs, RUNS_PER_QUERY).map((ids) =>
    api.queryRunsMetrics({ run_ids: ids, names: [...names], x, points, ...range }, signal)));
  return parts.flat();
}

export function usePanelsLoader({ runs, metrics, x, zoom, live, points: most = PANEL_POINTS, pollMs = 3000, onPoints }: PanelsLoaderOptions): PanelsLoader {
  // Resolution follows the number of runs in steps of 10, so a brush that drops a run refetches nothing.
  const points = pointsFor(Math.ceil(Math.max(1, runs.length) / 10) * 10, most);
  const stores = useRef(new Map<string, SeriesStore>());
  // One scheduler for every metric's store: the panels redraw together, at most every REDRAW_MS
  // (LIVE_REDRAW_MS while following live runs).
  const frames = useRef<ThrottledFrames | null>(null);
  const redrawMs = !zoom && live.length ? LIVE_REDRAW_MS : REDRAW_MS;
  const redrawRef = useRef(redrawMs);
  redrawRef.current = redrawMs;
  useEffect(() => {
    if (frames.current) frames.current.minMs = redrawMs;
  }, [redrawMs]);
  const store = useCallback((metric: string) => {
    let s = stores.current.get(metric);
    if (!s) {
      frames.current ??= new ThrottledFrames(redrawRef.current);
      stores.current.set(metric, (s = new SeriesStore(frames.current)));
    }
    return s;
  }, []);
  useEffect(() => () => {
    for (const s of stores.current.values()) s.dispose();
    stores.current.clear();
  }, []);

  // null until the panels first report where they are (no observer at all: all count as in view).
  const [inView, setInView] = useState<ReadonlySet<string> | null>(() =>
    typeof IntersectionObserver === "undefined" ? new Set(metrics) : null);
  const seen = useCallback((metric: string, visible: boolean) => setInView((v) => {
    if (v && (!visible || v.has(metric))) return v;
    const next = new Set(v ?? []);
    if (visible) next.add(metric);
    return next;
  }), []);
  const [error, setError] = useState<ApiError | undefined>();
  const holdings = useRef(new Holdings());
  // Where each run's streamed points go in each metric's columns (restarted by every read).
  const buckets = useRef(new LiveBuckets());
  // Bumped when a fetch lands: the next batch is worked out again, and `loaded` with it.
  const [landed, setLanded] = useState(0);

  const runsKey = runs.join(",");
  const zoomKey = zoom ? `${zoom[0]}..${zoom[1]}` : "";
  // The runs may change every frame while a brush is dragged: a new set of runs fetches only the
  // runs it adds, and what it drops stays cached. A new axis, zoom or resolution starts over.
  const viewKey = `${x}|${zoomKey}|${points}`;
  const generation = useRef(0);
  const controller = useRef<AbortController | null>(null);

  useEffect(() => {
    generation.current++;
    controller.current?.abort();
    controller.current = new AbortController();
    holdings.current.clear();
    buckets.current.clear();
    setError(undefined);
    setLanded((n) => n + 1);
    return () => controller.current?.abort();
  }, [viewKey]);

  const metricsKey = metrics.join("\u0000");
  useEffect(() => {
    if (!runs.length || !controller.current || !inView) return;
    const batch = nextBatch(metrics, runs, holdings.current, inView);
    if (!batch.metrics.length) return;
    const gen = generation.current;
    const signal = controller.current.signal;
    holdings.current.start(batch.metrics, batch.runs);
    // One request per metric, so each panel draws as soon as its own metric lands. The batch's
    // first metric (the primary, when in view) goes alone, and the rest together once it is in:
    // the daemon answers one request faster than eight at once, and the first chart is what
    // the user waits for.
    const one = (name: string) => fetchMetrics(batch.runs, [name], x, zoom, points, signal).then((all) => {
      if (gen !== generation.current) return;
      const s = store(name);
      for (const m of all) {
        s.replace(m.run_id, only(m, name));
        buckets.current.restart(m.run_id, name, s.lastX(m.run_id), s.widths.get(m.run_id) ?? 1);
      }
      holdings.current.done([name], batch.runs, true);
      setLanded((n) => n + 1);
    }, (e) => {
      if (gen !== generation.current) return;
      holdings.current.done([name], batch.runs, false);
      if (e.name === "AbortError") return;
      setError(e instanceof ApiError ? e : new ApiError(0, "client", e.message));
    });
    const [first, ...rest] = batch.metrics;
    void one(first).then(() => {
      if (gen === generation.current) for (const name of rest) void one(name);
    });
    // `landed` re-runs this after each batch, so the panels out of view follow the visible ones.
  }, [viewKey, runsKey, metricsKey, inView, landed, store]); // eslint-disable-line react-hooks/exhaustive-deps

  const loaded = useMemo(() => new Set(metrics.filter((m) => holdings.current.complete(m, runs))),
    [runsKey, metricsKey, landed]); // eslint-disable-line react-hooks/exhaustive-deps

  // Live runs, while not zoomed: their points come on one stream (chunks of MAX_FOLLOWED runs),
  // each event's points appended to the runs' series as they are; a run's series is read again
  // only when the stream says so (`ready`, `reset`) or its columns grew long. Polling (a tail
  // read) only while the stream is down.
  const listeners = useRef({ onPoints });
  listeners.current = { onPoints };
  const liveKey = live.join(",");
  const metricsRef = useRef(metrics);
  metricsRef.current = metrics;
  // The stream opens once the first metric is in, and stays open as the others land.
  const started = loaded.size > 0;
  useEffect(() => {
    if (zoom || !live.length || !started) return;
    const abort = new AbortController();
    const held = (id: string) => metricsRef.current.filter((n) => holdings.current.has(n, id));
    // A run being read: its events wait, and go on top of what the read brought.
    const waiting = new Map<string, RunPoints[]>();
    const take = (p: RunPoints) => {
      let long = false;
      for (const [name, s] of Object.entries(p.series)) {
        if (!holdings.current.has(name, p.run_id)) continue;
        const t = buckets.current.take(p.run_id, name, s, x);
        if (!t) continue;
        const st = store(name);
        st.append(p.run_id, t.metrics, t.from);
        long ||= st.points(p.run_id) > points * 3;
      }
      // Grown long: a fresh overview keeps the columns (and every redraw) small.
      if (long) queues.get(p.run_id)?.poke(true);
    };
    const read = async (id: string, full: boolean) => {
      const names = held(id);
      if (!names.length || abort.signal.aborted) return;
      const last = names.reduce<number | null>((lo, n) => {
        const lx = store(n).lastX(id);
        return lx === null ? lo : lo === null ? lx : Math.min(lo, lx);
      }, null);
      waiting.set(id, []);
      try {
        if (full || last === null) {
          const m = await api.runMetrics(id, { names, x, points }, abort.signal);
          for (const n of names) store(n).replace(id, only(m, n));
        } else {
          const m = await api.runMetrics(id, { names, x, points, start: last }, abort.signal);
          for (const n of names) store(n).append(id, only(m, n), last);
        }
        for (const n of names) { const st = store(n); buckets.current.restart(id, n, st.lastX(id), st.widths.get(id) ?? 1); }
      } catch (e) {
        if ((e as Error).name === "AbortError") return;
      } finally {
        const queued = waiting.get(id) ?? [];
        waiting.delete(id);
        if (!abort.signal.aborted) for (const p of queued) take(p);
      }
    };
    const queues = new Map(live.map((id) => [id, new TailQueue((full) => read(id, full))]));
    const polls: FallbackPoll[] = [];
    const names = metricsRef.current.length <= MAX_STREAM_NAMES ? metricsRef.current.join(",") : undefined;
    const streams = chunks(live, MAX_FOLLOWED).map((ids) => {
      const poll = new FallbackPoll(() => { for (const id of ids) queues.get(id)!.poke(false); }, pollMs);
      polls.push(poll);
      let lastSeq = 0;
      return new EventStream({
        path: "/runs/metrics/stream",
        query: { run_ids: ids.join(","), names },
        onMessage: (m) => {
          if (m.event === "ready" || m.event === "reset") {
            for (const id of ids) queues.get(id)!.poke(true);
            if (m.event === "reset") for (const id of ids) listeners.current.onPoints?.(id);
            return;
          }
          if (m.event !== "points") return;
          const p = parseRunPoints(m.data);
          if (!p || !queues.has(p.run_id) || p.seq <= lastSeq) return; // a batch sent again on a resume
          lastSeq = p.seq;
          const wait = waiting.get(p.run_id);
          if (wait) wait.push(p);
          else take(p);
          listeners.current.onPoints?.(p.run_id);
        },
        onState: (state) => poll.onState(state),
      });
    });
    return () => {
      abort.abort();
      for (const s of streams) s.close();
      for (const p of polls) p.stop();
    };
  }, [liveKey, started, x, zoomKey, points, pollMs, metricsKey, store]); // eslint-disable-line react-hooks/exhaustive-deps

  const loading = useMemo(() => runs.length > 0 && metrics.some((m) => !loaded.has(m)) && !error,
    [runsKey, metricsKey, loaded, error]); // eslint-disable-line react-hooks/exhaustive-deps
  return { store, seen, loaded, loading, error };
}
