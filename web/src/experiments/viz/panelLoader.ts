// Loading the workspace's panels, visible first: one SeriesStore per metric, so a metric is
// fetched (for every run at once, downsampled by the server) when its panel first shows,
// and the panels out of view follow in one batch after those. Live runs are followed as
// on Compare: each run's metric stream says when points were committed, a tail fetch reads
// them for the metrics loaded so far; polling runs only while a stream is down.

import { useCallback, useEffect, useMemo, useRef, useState } from "react";
import { api, ApiError } from "../../api/client";
import { EventStream } from "../../api/sse";
import type { RunMetrics } from "../../api/types";
import { FallbackPoll } from "../../charts/fallbackPoll";
import { TailQueue } from "../../charts/loader";
import { SeriesStore } from "../../charts/series";

/** POST /runs/metrics:query takes at most this many runs; more go in several requests at once. */
export const RUNS_PER_QUERY = 50;
/** Points per run and metric: a panel is a few hundred pixels wide, so more than this draws nothing new. */
export const PANEL_POINTS = 600;

export interface PanelsLoaderOptions {
  runs: readonly string[];
  metrics: readonly string[];
  x: "step" | "ts";
  zoom: [number, number] | null;
  live: readonly string[];
  points?: number;
  pollMs?: number;
  /** Told when a live run's stream announces points. */
  onPoints?: (runId: string) => void;
}

export interface PanelsLoader {
  store: (metric: string) => SeriesStore;
  /** Each panel tells whether it is in view (an IntersectionObserver's report); the metrics seen are loaded first. */
  seen: (metric: string, visible: boolean) => void;
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

/** What to fetch next: the metrics in view not loaded yet, or else all the others. */
export function nextBatch(metrics: readonly string[], loaded: ReadonlySet<string>, busy: ReadonlySet<string>,
  inView: ReadonlySet<string>): string[] {
  const need = metrics.filter((m) => !loaded.has(m) && !busy.has(m));
  const visible = need.filter((m) => inView.has(m));
  return visible.length ? visible : need;
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

export function usePanelsLoader({ runs, metrics, x, zoom, live, points = PANEL_POINTS, pollMs = 3000, onPoints }: PanelsLoaderOptions): PanelsLoader {
  const stores = useRef(new Map<string, SeriesStore>());
  const store = useCallback((metric: string) => {
    let s = stores.current.get(metric);
    if (!s) stores.current.set(metric, (s = new SeriesStore()));
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
  const [loaded, setLoaded] = useState<ReadonlySet<string>>(() => new Set());
  const [error, setError] = useState<ApiError | undefined>();
  const busy = useRef(new Set<string>());
  const loadedRef = useRef(loaded);
  loadedRef.current = loaded;

  const runsKey = runs.join(",");
  const zoomKey = zoom ? `${zoom[0]}..${zoom[1]}` : "";
  const viewKey = `${runsKey}|${x}|${zoomKey}|${points}`;
  const generation = useRef(0);
  const controller = useRef<AbortController | null>(null);

  // A new set of runs, axis or zoom: everything loaded is stale; fetch again, visible first.
  useEffect(() => {
    generation.current++;
    controller.current?.abort();
    controller.current = new AbortController();
    busy.current.clear();
    setLoaded(new Set());
    setError(undefined);
    return () => controller.current?.abort();
  }, [viewKey]);

  const metricsKey = metrics.join("\u0000");
  useEffect(() => {
    if (!runs.length || !controller.current || !inView) return;
    const batch = nextBatch(metrics, loadedRef.current, busy.current, inView);
    if (!batch.length) return;
    const gen = generation.current;
    const signal = controller.current.signal;
    for (const m of batch) busy.current.add(m);
    fetchMetrics(runs, batch, x, zoom, points, signal).then((all) => {
      if (gen !== generation.current) return;
      for (const name of batch) {
        const s = store(name);
        for (const m of all) s.replace(m.run_id, only(m, name));
        for (const id of s.runs()) if (!runs.includes(id)) s.removeRun(id);
        busy.current.delete(name);
      }
      setLoaded((l) => new Set([...l, ...batch]));
    }, (e) => {
      for (const m of batch) busy.current.delete(m);
      if (e.name === "AbortError" || gen !== generation.current) return;
      setError(e instanceof ApiError ? e : new ApiError(0, "client", e.message));
    });
    // `loaded` re-runs this after each batch, so the panels out of view follow the visible ones.
  }, [viewKey, metricsKey, inView, loaded, store]); // eslint-disable-line react-hooks/exhaustive-deps

  // Live tails for the metrics loaded so far, while not zoomed.
  const listeners = useRef({ onPoints });
  listeners.current = { onPoints };
  const liveKey = live.join(",");
  const loadedKey = [...loaded].sort().join("\u0000");
  useEffect(() => {
    const names = [...loaded];
    if (zoom || !live.length || !names.length) return;
    const abort = new AbortController();
    const tail = async (id: string, full: boolean) => {
      let last: number | null = null;
      let most = 0;
      for (const n of names) {
        const s = store(n);
        const lx = s.lastX(id);
        if (lx !== null) last = last === null ? lx : Math.min(last, lx);
        most = Math.max(most, s.points(id));
      }
      try {
        if (full || last === null || most > points * 3) {
          const m = await api.runMetrics(id, { names, x, points }, abort.signal);
          for (const n of names) store(n).replace(id, only(m, n));
        } else {
          const m = await api.runMetrics(id, { names, x, points, start: last }, abort.signal);
          for (const n of names) store(n).append(id, only(m, n), last);
        }
      } catch (e) {
        if ((e as Error).name === "AbortError") return;
      }
    };
    const polls: FallbackPoll[] = [];
    const streams = live.map((id) => {
      const queue = new TailQueue((full) => tail(id, full));
      const poll = new FallbackPoll(() => queue.poke(false), pollMs);
      polls.push(poll);
      return new EventStream({
        path: `/runs/${encodeURIComponent(id)}/metrics/stream`,
        onMessage: (m) => {
          if (m.event === "points" || m.event === "ready") queue.poke(false);
          else if (m.event === "reset") queue.poke(true);
          if (m.event === "points" || m.event === "reset") listeners.current.onPoints?.(id);
        },
        onState: (state) => poll.onState(state),
      });
    });
    return () => {
      abort.abort();
      for (const s of streams) s.close();
      for (const p of polls) p.stop();
    };
  }, [liveKey, loadedKey, x, zoomKey, points, pollMs, store]); // eslint-disable-line react-hooks/exhaustive-deps

  const loading = useMemo(() => runs.length > 0 && metrics.some((m) => !loaded.has(m)) && !error,
    [runsKey, metricsKey, loaded, error]); // eslint-disable-line react-hooks/exhaustive-deps
  return { store, seen, loaded, loading, error };
}
