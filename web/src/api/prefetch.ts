// Requests started before React renders: a run page's chart data is asked for while the
// page's code is still loading, and the page takes the answer instead of asking again.

import { matchPath } from "../router/router";
import { parseState } from "../router/urlState";
import { api } from "./client";
import { metricsKey, metricsViewSchema, DEFAULT_POINTS } from "./metricsKey";

const started = new Map<string, Promise<unknown>>();

export function prefetch<T>(key: string, fetcher: () => Promise<T>): void {
  const promise = fetcher();
  promise.catch(() => undefined); // an unused failure must not be reported as unhandled
  started.set(key, promise);
}

/** The prefetched answer for `key`, once; undefined when none was started. */
export function takePrefetched<T>(key: string): Promise<T> | undefined {
  const promise = started.get(key) as Promise<T> | undefined;
  started.delete(key);
  return promise;
}

/** Start what the page at `pathname + search` will ask for first. */
export function prefetchFor(pathname: string, search: string): void {
  const run = matchPath("/runs/:id", pathname);
  if (run) {
    const view = parseState(search, metricsViewSchema);
    if (view.tab !== "metrics") return;
    const query = { x: view.x, points: DEFAULT_POINTS, ...(view.xr ? { start: Math.max(0, Math.floor(view.xr[0])), end: Math.ceil(view.xr[1]) } : {}) };
    prefetch(metricsKey([run.id], query), () => api.runMetrics(run.id, query).then((m) => [m]));
    return;
  }
  if (pathname === "/compare") {
    const view = parseState(search, metricsViewSchema);
    const ids = [...new Set(view.runs)].slice(0, 50);
    if (ids.length < 2) return;
    const query = { x: view.x, points: DEFAULT_POINTS, ...(view.xr ? { start: Math.max(0, Math.floor(view.xr[0])), end: Math.ceil(view.xr[1]) } : {}) };
    prefetch(metricsKey(ids, query), () => api.queryRunsMetrics({ run_ids: ids, ...query }));
  }
}
