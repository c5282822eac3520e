// Run summaries for tables: fetched a few at a time (GET /runs has no summaries in it),
// cached for the session, refreshed while a run is still running (on the daemon's changes stream).

import { useEffect, useRef, useState } from "react";
import { changes } from "../api/changes";
import { api } from "../api/client";
import type { RunSummary } from "../api/types";
import { throttle } from "./throttle";

const cache = new Map<string, RunSummary>();

export async function mapLimit<T>(items: readonly T[], limit: number, fn: (item: T) => Promise<void>): Promise<void> {
  let next = 0;
  const worker = async () => {
    while (next < items.length) {
      const item = items[next++];
      await fn(item);
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, worker));
}

export function useSummaries(ids: readonly string[], running: readonly string[], refreshMs = 10_000): Map<string, RunSummary> {
  const [version, setVersion] = useState(0);
  const key = ids.join(",");
  const runningKey = running.join(",");
  const stopped = useRef(false);

  useEffect(() => {
    stopped.current = false;
    const abort = new AbortController();
    const missing = ids.filter((id) => !cache.has(id));
    void mapLimit(missing, 4, async (id) => {
      if (stopped.current) return;
      try {
        cache.set(id, await api.runSummary(id, abort.signal));
        setVersion((v) => v + 1);
      } catch {
        // a run without metrics yet, or gone: its cells stay empty
      }
    });
    return () => {
      stopped.current = true;
      abort.abort();
    };
  }, [key]); // eslint-disable-line react-hooks/exhaustive-deps

  // A running run's summary is rewritten as its points arrive, and each rewrite is a `runs` change:
  // asked again on those (at most every refreshMs), and on a timer only while the stream is down.
  useEffect(() => {
    if (!running.length) return;
    const abort = new AbortController();
    const refresh = throttle(() => {
      void mapLimit(running, 4, async (id) => {
        try {
          cache.set(id, await api.runSummary(id, abort.signal));
        } catch {
          return;
        }
        setVersion((v) => v + 1);
      });
    }, refreshMs);
    let poll: ReturnType<typeof setInterval> | null = null;
    const unsubscribe = changes.subscribe(["runs"], {
      onChange: () => refresh.call(),
      onDown: (down) => {
        if (down && poll === null) poll = setInterval(() => {
          if (document.visibilityState !== "hidden") refresh.call();
        }, refreshMs);
        if (!down && poll !== null) {
          clearInterval(poll);
          poll = null;
        }
      },
    });
    return () => {
      unsubscribe();
      refresh.cancel();
      if (poll !== null) clearInterval(poll);
      abort.abort();
    };
  }, [runningKey, refreshMs]); // eslint-disable-line react-hooks/exhaustive-deps

  const out = new Map<string, RunSummary>();
  void version;
  for (const id of ids) {
    const s = cache.get(id);
    if (s) out.set(id, s);
  }
  return out;
}

/** The metric names to show as table columns: the most common, directed metrics first. */
export function defaultMetricColumns(summaries: Iterable<RunSummary>, max = 4): string[] {
  const seen = new Map<string, { n: number; directed: boolean }>();
  for (const s of summaries) {
    for (const [name, m] of Object.entries(s.metrics)) {
      const e = seen.get(name) ?? { n: 0, directed: false };
      e.n++;
      e.directed ||= !!m.direction;
      seen.set(name, e);
    }
  }
  return [...seen.entries()]
    .sort((a, b) => Number(b[1].directed) - Number(a[1].directed) || b[1].n - a[1].n || a[0].localeCompare(b[0]))
    .slice(0, max)
    .map(([name]) => name)
    .sort();
}
