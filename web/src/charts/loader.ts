// Fetching run metrics into a SeriesStore: the overview (or, when zoomed, the detail of
// the zoomed range) for every run, then, while a run is live and the view is not zoomed,
// a tail from its last x each time its metric stream announces committed points (polled
// for only while that stream is down). The server downsamples; nothing here holds more
// than a few thousand points per metric.

import { useEffect, useRef, useState } from "react";
import { api, ApiError } from "../api/client";
import type { RunMetrics } from "../api/types";
import { DEFAULT_POINTS, metricsKey } from "../api/metricsKey";
import { takePrefetched } from "../api/prefetch";
import { EventStream, type StreamState } from "../api/sse";
import { FallbackPoll } from "./fallbackPoll";
import type { SeriesStore } from "./series";

export interface LoaderOptions {
  store: SeriesStore;
  runs: readonly string[];
  x: "step" | "ts";
  zoom: [number, number] | null;
  /** Runs still producing points (their tails follow the run's metric stream). */
  live: readonly string[];
  points?: number;
  /** Polling period while a run's stream is down (reconnecting or refused). */
  pollMs?: number;
  /** Told when a live run's stream announces points (a run page refreshes its summary then). */
  onPoints?: (runId: string) => void;
  /** Told each state of a live run's stream. */
  onStreamState?: (runId: string, state: StreamState) => void;
}

export interface LoaderState {
  loading: boolean;
  error: ApiError | undefined;
  /** ms from asking to having the data in the store, for the last full fetch. */
  fetchMs: number | null;
  /** Bucket width of the last full fetch (x units per point; 1 = every point). */
  width: number | null;
}

export { DEFAULT_POINTS };

async function fetchRuns(runs: readonly string[], x: "step" | "ts", zoom: [number, number] | null, points: number,
  signal: AbortSignal, start?: number): Promise<RunMetrics[]> {
  const range = zoom ? { start: Math.max(0, Math.floor(zoom[0])), end: Math.ceil(zoom[1]) } : start !== undefined ? { start } : {};
  if (start === undefined) {
    const early = takePrefetched<RunMetrics[]>(metricsKey(runs, { x, points, ...range }));
    if (early) return early;
  }
  if (runs.length === 1) return [await api.runMetrics(runs[0], { x, points, ...range }, signal)];
  return api.queryRunsMetrics({ run_ids: [...runs], x, points, ...range }, signal);
}

/** Tail fetches of one run: one at a time, and one more after it when points were announced
 * meanwhile (a burst of announcements is one fetch). `full` (a reset) wins over a tail. */
export class TailQueue {
  private busy = false;
  private pending: boolean | null = null;
  constructor(private readonly fetchTail: (full: boolean) => Promise<void>) {}

  poke(full: boolean): void {
    this.pending = (this.pending ?? false) || full;
    if (!this.busy) void this.drain();
  }

  private async drain(): Promise<void> {
    this.busy = true;
    try {
      while (this.pending !== null) {
        const full = this.pending;
        this.pending = null;
        await this.fetchTail(full);
      }
    } finally {
      this.busy = false;
    }
  }
}

/** Runs on one GET /runs/metrics/stream (the daemon's limit). */
export const MAX_FOLLOWED = 64;

/** The run a several-run stream's `points` event is of (its data's run_id); null when it names none. */
export function pointsRun(data: string): string | null {
  try {
    const id = (JSON.parse(data) as { run_id?: unknown }).run_id;
    return typeof id === "string" ? id : null;
  } catch {
    return null;
  }
}

function chunks<T>(items: readonly T[], size: number): T[][] {
  const out: T[][] = [];
  for (let i = 0; i < items.length; i += size) out.push(items.slice(i, i + size));
  return out;
}

export function useMetricsLoader({ store, runs, x, zoom, live, points = DEFAULT_POINTS, pollMs = 3000, onPoints,
  onStreamState }: LoaderOptions): LoaderState {
  const [state, setState] = useState<LoaderState>({ loading: true, error: undefined, fetchMs: null, width: null });
  const runsKey = runs.join(",");
  const liveKey = live.join(",");
  const zoomKey = zoom ? `${zoom[0]}..${zoom[1]}` : "";
  const generation = useRef(0);
  const listeners = useRef({ onPoints, onStreamState });
  listeners.current = { onPoints, onStreamState };

  useEffect(() => {
    if (!runs.length) {
      setState({ loading: false, error: undefined, fetchMs: null, width: null });
      return;
    }
    const gen = ++generation.current;
    const abort = new AbortController();
    const started = performance.now();
    setState((s) => ({ ...s, loading: true, error: undefined }));
    fetchRuns(runs, x, zoom, points, abort.signal).then((all) => {
      if (gen !== generation.current) return;
      for (const m of all) store.replace(m.run_id, m);
      for (const id of store.runs()) if (!runs.includes(id)) store.removeRun(id);
      setState({ loading: false, error: undefined, fetchMs: Math.round(performance.now() - started),
        width: Math.max(...all.map((m) => m.width)) });
    }, (e) => {
      if (e.name === "AbortError" || gen !== generation.current) return;
      setState((s) => ({ ...s, loading: false, error: e instanceof ApiError ? e : new ApiError(0, "client", e.message) }));
    });
    return () => abort.abort();
  }, [store, runsKey, x, zoomKey, points]); // eslint-disable-line react-hooks/exhaustive-deps

  useEffect(() => {
    if (zoom || !live.length) return;
    const abort = new AbortController();
    const tail = async (id: string, full: boolean) => {
      const last = store.lastX(id);
      try {
        if (full || last === null || store.points(id) > points * 3) {
          // Nothing yet, a reset, or the tail grew long: a fresh overview keeps the columns small.
          const [m] = await fetchRuns([id], x, null, points, abort.signal);
          store.replace(id, m);
        } else {
          const [m] = await fetchRuns([id], x, null, points, abort.signal, last);
          store.append(id, m, last);
        }
      } catch (e) {
        if ((e as Error).name === "AbortError") return;
      }
    };
    // The run's metric stream says when points were committed; the tail itself is still read
    // from the metrics endpoint, so it is bucketed like the overview. Polling only while the
    // stream is down (reconnecting, or refused by a daemon without it); once it is open again
    // its "ready" brings the tail up to date. Several live runs share one stream
    // (GET /runs/metrics/stream?run_ids=): a browser holds only six connections to a host.
    const queues = new Map(live.map((id) => [id, new TailQueue((full) => tail(id, full))]));
    const pokeAll = (full: boolean) => { for (const q of queues.values()) q.poke(full); };
    const polls: FallbackPoll[] = [];
    const follow = (path: string, ids: readonly string[], query?: Record<string, string>) => {
      const poll = new FallbackPoll(() => { for (const id of ids) queues.get(id)!.poke(false); }, pollMs);
      polls.push(poll);
      return new EventStream({
        path, query,
        onMessage: (m) => {
          if (m.event === "ready") pokeAll(false);
          else if (m.event === "reset") pokeAll(true);
          if (m.event === "reset") for (const id of ids) listeners.current.onPoints?.(id);
          if (m.event !== "points") return;
          const id = ids.length === 1 ? ids[0] : pointsRun(m.data);
          if (id === null || !queues.has(id)) return;
          queues.get(id)!.poke(false);
          listeners.current.onPoints?.(id);
        },
        onState: (state) => {
          poll.onState(state);
          for (const id of ids) listeners.current.onStreamState?.(id, state);
        },
      });
    };
    const streams = live.length === 1
      ? [follow(`/runs/${encodeURIComponent(live[0])}/metrics/stream`, live)]
      : chunks(live, MAX_FOLLOWED).map((ids) => follow("/runs/metrics/stream", ids, { run_ids: ids.join(",") }));
    return () => {
      abort.abort();
      for (const s of streams) s.close();
      for (const p of polls) p.stop();
    };
  }, [store, liveKey, x, zoomKey, points, pollMs]); // eslint-disable-line react-hooks/exhaustive-deps

  return state;
}
