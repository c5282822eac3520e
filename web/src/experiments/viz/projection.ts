// Parallel coordinates, precomputed: where each axis stands, every run's pixel on every
// axis (one flat Float32Array, so a redraw while brushing only strokes), and the hit
// tests for the pointer (which axis is under it, which run's line is nearest).

import { makeScale, type Scale } from "./scale";
import type { Axis, VizRow } from "./types";

export interface Layout {
  width: number;
  height: number;
  top: number;
  bottom: number;
  left: number;
  right: number;
}

export interface Projection {
  scales: Scale[];
  /** The x pixel of each axis. */
  xs: number[];
  /** Row r's y on axis a is ys[r * axes + a]; NaN where the run has no value there. */
  ys: Float32Array;
  rows: readonly VizRow[];
}

export function axisXs(count: number, left: number, right: number): number[] {
  if (count <= 0) return [];
  if (count === 1) return [(left + right) / 2];
  return Array.from({ length: count }, (_, i) => left + (i * (right - left)) / (count - 1));
}

export function project(axes: readonly Axis[], rows: readonly VizRow[], layout: Layout): Projection {
  // Vertical axes: the smallest value at the bottom.
  const scales = axes.map((a) => makeScale(a, rows, layout.height - layout.bottom, layout.top));
  const xs = axisXs(axes.length, layout.left, layout.width - layout.right);
  const n = axes.length;
  const ys = new Float32Array(rows.length * n);
  rows.forEach((row, r) => {
    for (let a = 0; a < n; a++) ys[r * n + a] = scales[a].toPx(row.values[axes[a].key]);
  });
  return { scales, xs, ys, rows };
}

/** The axis within `reach` pixels of x, or -1. */
export function axisAt(xs: readonly number[], x: number, reach = 14): number {
  let best = -1;
  let bestD = reach;
  xs.forEach((ax, i) => {
    const d = Math.abs(ax - x);
    if (d <= bestD) {
      best = i;
      bestD = d;
    }
  });
  return best;
}

/** The index of the row whose line passes nearest (x, y), within `reach` pixels vertically, or -1. */
export function nearestRow(p: Projection, x: number, y: number, reach = 6, only?: (r: number) => boolean): number {
  const n = p.xs.length;
  if (!n || !p.rows.length) return -1;
  let seg = 0;
  while (seg < n - 2 && x > p.xs[seg + 1]) seg++;
  const x0 = p.xs[seg];
  const x1 = n > 1 ? p.xs[seg + 1] : x0;
  const t = x1 > x0 ? Math.min(1, Math.max(0, (x - x0) / (x1 - x0))) : 0;
  let best = -1;
  let bestD = reach;
  for (let r = 0; r < p.rows.length; r++) {
    if (only && !only(r)) continue;
    const y0 = p.ys[r * n + seg];
    const y1 = n > 1 ? p.ys[r * n + seg + 1] : y0;
    if (Number.isNaN(y0) || Number.isNaN(y1)) continue;
    const d = Math.abs(y0 + (y1 - y0) * t - y);
    if (d <= bestD) {
      best = r;
      bestD = d;
    }
  }
  return best;
}
