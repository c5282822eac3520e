// A node's system charts follow GET /nodes/{node}/stream: each `snapshot` (about every 2 s)
// becomes one more point at the end of the fetched series, so a followed window asks the
// daemon for nothing while the stream is up, and polls only while it is down.

import { useEffect, useState } from "react";
import { api } from "./client";
import { type Resource, useEventStream, useResource } from "./hooks";
import { streamDown } from "./pushedByStream";
import type { NodeMetrics, NodeSnapshot } from "./types";

/** `start`..`end` (null: now, followed), or a `window` back from now ("1h"), followed. */
export type Span = { start: number; end: number | null } | { window: string };

/**
 * A node's series `names` over `span`: fetched once; a followed span (a window, or an open end)
 * then grows by each snapshot of the node's stream, and is fetched every `pollMs` only while
 * that stream is down (and once when it is back: the readings it missed).
 */
export function useFollowedNodeMetrics(nodeId: string, span: Span, names: readonly string[], pollMs: number):
  Resource<NodeMetrics> {
  const spanKey = "window" in span ? span.window : `${span.start}..${span.end}`;
  const live = "window" in span || span.end === null;
  const keep = "window" in span ? windowMs(span.window) : null;
  const [followed, setFollowed] = useState<NodeMetrics | undefined>(undefined);
  const stream = useEventStream(live ? `node/${nodeId}/${spanKey}/${names.join(",")}` : null,
    { path: `/nodes/${encodeURIComponent(nodeId)}/stream` }, (m) => {
      if (m.event !== "snapshot") return;
      const snapshot = JSON.parse(m.data) as NodeSnapshot;
      setFollowed((d) => (d ? appendSnapshot(d, snapshot, names, keep) : d));
    });
  const metrics = useResource((signal) => {
    if ("window" in span) return api.nodeMetrics(nodeId, { names, window: span.window, points: 600 }, signal);
    const stop = span.end ?? Date.now();
    return api.nodeMetrics(nodeId, { names, start: Math.min(span.start, stop - 60_000), end: stop, points: 600 }, signal);
  }, [nodeId, spanKey, names.join(",")], { pollMs: live && streamDown(stream.state) ? pollMs : undefined });
  useEffect(() => setFollowed(metrics.data), [metrics.data]);
  return { ...metrics, data: followed ?? metrics.data };
}

/** Where each charted series' value is in a snapshot: gpu<N>.<metric> -> its GPU's reading, host.<metric> -> the host's. */
const GPU_FIELD: Record<string, string> = {
  utilization: "utilization_pct", memory_used_mb: "memory_used_mb", temperature_c: "temperature_c", power_w: "power_w",
};

function readingOf(snapshot: NodeSnapshot, name: string): number | null {
  const gpu = /^gpu(\d+)\.(.+)$/.exec(name);
  if (gpu) {
    const field = GPU_FIELD[gpu[2]];
    const reading = snapshot.gpus.find((g) => g.index === Number(gpu[1])) as Record<string, unknown> | undefined;
    const v = field && reading ? reading[field] : null;
    return typeof v === "number" ? v : null;
  }
  const host = /^host\.(.+)$/.exec(name);
  const v = host && snapshot.host ? (snapshot.host as Record<string, unknown>)[host[1]] : null;
  return typeof v === "number" ? v : null;
}

/** The series a snapshot fills: the fetched ones, or, while none was fetched, each GPU's of those asked for (gpu*). */
function namesFor(metrics: NodeMetrics, snapshot: NodeSnapshot, asked: readonly string[]): string[] {
  const names = new Set(Object.keys(metrics.series));
  for (const a of asked) {
    const any = /^gpu\*\.(.+)$/.exec(a);
    if (any) for (const g of snapshot.gpus) names.add(`gpu${g.index}.${any[1]}`);
    else if (!a.includes("*")) names.add(a);
  }
  return [...names];
}

/**
 * `metrics` with `snapshot` appended as one point (a new object; `metrics` is left as it was), the
 * points older than `windowMs` before it dropped (null: a span that keeps its start). A snapshot
 * not newer than the last point changes nothing (the stream's first one may be in the fetch).
 */
export function appendSnapshot(metrics: NodeMetrics, snapshot: NodeSnapshot, asked: readonly string[],
  windowMs: number | null): NodeMetrics {
  const lastX = metrics.x.length ? metrics.x[metrics.x.length - 1] : -Infinity;
  if (snapshot.ts <= lastX) return metrics;
  let drop = 0;
  if (windowMs !== null) while (drop < metrics.x.length && metrics.x[drop] < snapshot.ts - windowMs) drop++;
  const n = metrics.x.length;
  const series: NodeMetrics["series"] = {};
  for (const name of namesFor(metrics, snapshot, asked)) {
    const old = metrics.series[name];
    const v = readingOf(snapshot, name);
    const col = (c: (number | null)[] | undefined, add: number | null) =>
      [...(c ?? new Array<number | null>(n).fill(null)).slice(drop), add];
    series[name] = { min: col(old?.min, v), max: col(old?.max, v), avg: col(old?.avg, v), last: col(old?.last, v),
      count: col(old?.count, v === null ? 0 : 1), nan: col(old?.nan, 0) };
  }
  return { ...metrics, x: [...metrics.x.slice(drop), snapshot.ts], end: Math.max(metrics.end, snapshot.ts), series };
}

const UNIT_MS: Record<string, number> = { s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 };

/** "15m", "1h", "7d" in ms; null for anything else. */
export function windowMs(window: string): number | null {
  const m = /^(\d+)([smhd])$/.exec(window);
  return m ? Number(m[1]) * UNIT_MS[m[2]] : null;
}
