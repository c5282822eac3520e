// Data hooks: a fetched resource, refetched on the daemon's changes stream (`live`) or by
// polling (paused while the tab is hidden), a followed SSE stream, and a ticking clock for "3m ago" labels.

import { useCallback, useEffect, useRef, useState } from "react";
import { changes, type Topic } from "./changes";
import { ApiError } from "./client";
import { EventStream, type SSEMessage, type StreamOptions, type StreamState } from "./sse";

export interface Resource<T> {
  data: T | undefined;
  error: ApiError | undefined;
  loading: boolean;
  reload: () => void;
  /** Replace the data locally (an action's reply) without a fetch. */
  mutate: (update: (data: T | undefined) => T | undefined) => void;
}

export interface ResourceOptions {
  /** Fetch again this often (without `live`), or only while the changes stream is down (with it). */
  pollMs?: number;
  keepPrevious?: boolean;
  /**
   * Follow the daemon's changes stream: fetch again when it names one of these topics, and on each
   * of its `ready`s (it opened or came back). Nothing then runs on a timer while it is up.
   */
  live?: readonly Topic[];
  /** With `live`: fetched at most this often (a lone change at once, a burst's rest at the gap's end). */
  liveGapMs?: number;
}

/** A live resource's default least gap: a training run rewrites its run's summary every few hundred ms. */
export const LIVE_GAP_MS = 1000;

export function useResource<T>(
  fetcher: ((signal: AbortSignal) => Promise<T>) | null,
  deps: readonly unknown[],
  options: ResourceOptions = {},
): Resource<T> {
  const [data, setData] = useState<T | undefined>(undefined);
  const [error, setError] = useState<ApiError | undefined>(undefined);
  const [loading, setLoading] = useState(fetcher !== null);
  const [tick, setTick] = useState(0);
  const fetcherRef = useRef(fetcher);
  fetcherRef.current = fetcher;
  const { pollMs, keepPrevious = true, live, liveGapMs = LIVE_GAP_MS } = options;
  const liveKey = live ? live.join(",") : null;

  useEffect(() => {
    if (!keepPrevious) setData(undefined);
    setError(undefined);
  }, deps); // eslint-disable-line react-hooks/exhaustive-deps

  useEffect(() => {
    const fetchNow = fetcherRef.current;
    if (!fetchNow) {
      setLoading(false);
      return;
    }
    const abort = new AbortController();
    let timer: ReturnType<typeof setTimeout> | null = null;
    let pokeTimer: ReturnType<typeof setTimeout> | null = null;
    let lastStart = -Infinity;
    let stopped = false;
    let inFlight = false;
    let again = false; // a change came while fetching: that fetch may predate it
    let down = liveKey === null; // without live, pollMs always applies
    const polling = () => !!pollMs && down;
    const unschedule = () => {
      if (timer !== null) clearTimeout(timer);
      timer = null;
    };
    const schedule = () => {
      if (polling() && timer === null && !stopped) timer = setTimeout(() => {
        timer = null;
        void run();
      }, pollMs);
    };
    // A change: fetch now, or at the end of the least gap since the last fetch began.
    const poke = () => {
      if (stopped || pokeTimer !== null) return;
      const wait = lastStart + liveGapMs - Date.now();
      if (wait <= 0) void run();
      else pokeTimer = setTimeout(() => {
        pokeTimer = null;
        void run();
      }, wait);
    };
    const run = async () => {
      if (stopped) return;
      unschedule();
      if (inFlight) {
        again = true;
        return;
      }
      if (polling() && document.visibilityState === "hidden") {
        schedule();
        return;
      }
      inFlight = true;
      lastStart = Date.now();
      setLoading(true);
      try {
        const value = await fetcherRef.current!(abort.signal);
        if (stopped) return;
        setData(value);
        setError(undefined);
      } catch (e) {
        if (stopped || (e as Error).name === "AbortError") return;
        setError(e instanceof ApiError ? e : new ApiError(0, "client", (e as Error).message));
      } finally {
        inFlight = false;
        if (!stopped) setLoading(false);
      }
      if (stopped) return;
      if (again) {
        again = false;
        poke();
        return;
      }
      schedule();
    };
    const unsubscribe = liveKey === null ? null : changes.subscribe(liveKey.split(","), {
      onChange: poke,
      onDown: (d) => {
        down = d;
        if (!d) unschedule();
        else if (!inFlight) schedule();
      },
    });
    void run();
    const onVisible = () => {
      if (polling() && document.visibilityState === "visible" && timer !== null) void run();
    };
    document.addEventListener("visibilitychange", onVisible);
    return () => {
      stopped = true;
      abort.abort();
      unschedule();
      if (pokeTimer !== null) clearTimeout(pokeTimer);
      unsubscribe?.();
      document.removeEventListener("visibilitychange", onVisible);
    };
  }, [...deps, tick, pollMs, liveKey, liveGapMs, fetcher === null]); // eslint-disable-line react-hooks/exhaustive-deps

  const reload = useCallback(() => setTick((t) => t + 1), []);
  const mutate = useCallback((update: (d: T | undefined) => T | undefined) => setData(update), []);
  return { data, error, loading, reload, mutate };
}

/**
 * Follow an SSE stream while `options` is non-null; reconnects with backoff and resumes.
 * `onMessage` may change between renders; the stream is reopened only when `key` changes.
 */
export function useEventStream(
  key: string | null,
  options: Omit<StreamOptions, "onMessage" | "onState"> | null,
  onMessage: (message: SSEMessage) => void,
): { state: StreamState; error?: Error; stream: EventStream | null } {
  const [state, setState] = useState<StreamState>("connecting");
  const [error, setError] = useState<Error | undefined>(undefined);
  const handler = useRef(onMessage);
  handler.current = onMessage;
  const streamRef = useRef<EventStream | null>(null);
  const optionsRef = useRef(options);
  optionsRef.current = options;

  useEffect(() => {
    const opts = optionsRef.current;
    if (key === null || !opts) {
      setState("closed");
      return;
    }
    const stream = new EventStream({
      ...opts,
      onMessage: (m) => handler.current(m),
      onState: (s, e) => {
        setState(s);
        setError(e);
      },
    });
    streamRef.current = stream;
    return () => {
      stream.close();
      streamRef.current = null;
    };
  }, [key]);

  return { state, error, stream: streamRef.current };
}

export function useNow(intervalMs = 1000): number {
  const [now, setNow] = useState(() => Date.now());
  useEffect(() => {
    const id = setInterval(() => setNow(Date.now()), intervalMs);
    return () => clearInterval(id);
  }, [intervalMs]);
  return now;
}
