// Vertical scales for the parallel-coordinates axes and the scatter: where a value sits in
// pixels, which value sits at a pixel (to turn a drag into a brush), the ticks, and the
// pixel extent of a brush. Pure, so the projection and the hit tests are unit tested.

import { fmtTick } from "../../lib/format";
import { categoryLabel, rangeBrush } from "./brush";
import type { Axis, Brush, Value, VizRow } from "./types";

export interface Tick {
  px: number;
  label: string;
}

export interface Scale {
  axis: Axis;
  /** Pixel ends: `lo` holds the smallest value (the bottom on a vertical axis). */
  lo: number;
  hi: number;
  /** Category axes: the categories, lo to hi. */
  categories: string[];
  /** Numeric axes: the data's span (in values, not logs). */
  domain: [number, number];
  /** The pixel of a value; NaN when it has no place here (a string on a numeric axis, 0 on a log one). */
  toPx(v: Value | undefined): number;
  /** The value at a pixel (numeric axes; category axes give the category index). */
  fromPx(px: number): number;
  ticks(): Tick[];
}

function finiteNumbers(rows: readonly VizRow[], key: string, positiveOnly: boolean): number[] {
  const out: number[] = [];
  for (const r of rows) {
    const v = r.values[key];
    if (typeof v === "number" && Number.isFinite(v) && (!positiveOnly || v > 0)) out.push(v);
  }
  return out;
}

function span(values: number[]): [number, number] {
  let min = Infinity;
  let max = -Infinity;
  for (const v of values) {
    if (v < min) min = v;
    if (v > max) max = v;
  }
  return [min, max];
}

/** About `count` round ticks between a and b (1, 2, 5 times a power of ten). */
export function niceTicks(a: number, b: number, count = 5): number[] {
  if (!(b > a)) return Number.isFinite(a) ? [a] : [];
  const raw = (b - a) / Math.max(1, count);
  const mag = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 5, 10].map((m) => m * mag).find((s) => s >= raw) ?? 10 * mag;
  const out: number[] = [];
  for (let t = Math.ceil(a / step) * step; t <= b + step * 1e-9; t += step) out.push(Number(t.toPrecision(12)));
  return out;
}

/** The categories of a key in the order an axis shows them: numbers by value, then the rest by name. */
export function categoriesOf(rows: readonly VizRow[], key: string): string[] {
  const numeric = new Map<string, number>();
  const other = new Set<string>();
  for (const r of rows) {
    const v = r.values[key];
    if (typeof v === "number") numeric.set(categoryLabel(v), v);
    else other.add(categoryLabel(v));
  }
  const nums = [...numeric.entries()].sort((a, b) => a[1] - b[1]).map(([label]) => label);
  return [...nums, ...[...other].sort((a, b) => a.localeCompare(b))];
}

/** A scale for `axis` over the rows, from pixel `lo` (smallest value) to pixel `hi`. */
export function makeScale(axis: Axis, rows: readonly VizRow[], lo: number, hi: number): Scale {
  const len = hi - lo;
  if (axis.kind === "category") {
    const categories = axis.categories ?? categoriesOf(rows, axis.key);
    const index = new Map(categories.map((c, i) => [c, i]));
    const n = Math.max(1, categories.length);
    const at = (i: number) => lo + ((i + 0.5) / n) * len;
    return {
      axis, lo, hi, categories, domain: [0, n - 1],
      toPx: (v) => {
        const i = index.get(categoryLabel(v));
        return i === undefined ? NaN : at(i);
      },
      fromPx: (px) => ((px - lo) / len) * n - 0.5,
      ticks: () => categories.map((c, i) => ({ px: at(i), label: c })),
    };
  }
  const log = axis.kind === "log";
  const values = finiteNumbers(rows, axis.key, log);
  let [min, max] = values.length ? span(values) : log ? [1, 10] : [0, 1];
  const f = log ? Math.log10 : (v: number) => v;
  const inv = log ? (v: number) => 10 ** v : (v: number) => v;
  let a = f(min);
  let b = f(max);
  if (a === b) {
    // One value: centre it.
    const pad = log ? 0.5 : Math.abs(a) * 0.1 || 0.5;
    a -= pad;
    b += pad;
    [min, max] = [inv(a), inv(b)];
  }
  return {
    axis, lo, hi, categories: [], domain: [min, max],
    toPx: (v) => (typeof v === "number" && Number.isFinite(v) && (!log || v > 0) ? lo + ((f(v) - a) / (b - a)) * len : NaN),
    fromPx: (px) => inv(a + ((px - lo) / len) * (b - a)),
    ticks: () => {
      const at = log
        ? logTicks(a, b)
        : niceTicks(a, b, Math.max(2, Math.min(6, Math.floor(Math.abs(len) / 40))));
      return at.map((t) => ({ px: lo + ((f(t) - a) / (b - a)) * len, label: fmtTick(t) }));
    },
  };
}

function logTicks(a: number, b: number): number[] {
  const out: number[] = [];
  const steps = b - a < 2 ? [1, 2, 5] : [1];
  for (let e = Math.floor(a); e <= Math.ceil(b); e++) {
    for (const m of steps) {
      const t = m * 10 ** e;
      const l = Math.log10(t);
      if (l >= a - 1e-9 && l <= b + 1e-9) out.push(Number(t.toPrecision(12)));
    }
  }
  return out;
}

/** The brush a drag from pixel p0 to p1 along the axis sets; null for a click (or a set that catches nothing). */
export function brushFromDrag(scale: Scale, p0: number, p1: number): Brush | null {
  if (Math.abs(p1 - p0) < 3) return null;
  if (scale.axis.kind === "category") {
    const [s, e] = [Math.min(p0, p1), Math.max(p0, p1)];
    const values = scale.categories.filter((c) => {
      const px = scale.toPx(c);
      return px >= s && px <= e;
    });
    return values.length ? { kind: "set", values } : null;
  }
  return rangeBrush(scale.fromPx(p0), scale.fromPx(p1));
}

/** The pixel spans a brush covers on a scale, to draw it: one for a range, one per chosen category. */
export function brushSpans(scale: Scale, brush: Brush): [number, number][] {
  if (brush.kind === "range") {
    if (scale.axis.kind === "category") return [];
    const clamp = (v: number) => Math.min(Math.max(v, scale.domain[0]), scale.domain[1]);
    const p = scale.toPx(clamp(brush.min));
    const q = scale.toPx(clamp(brush.max));
    return Number.isFinite(p) && Number.isFinite(q) ? [[Math.min(p, q), Math.max(p, q)]] : [];
  }
  const half = Math.abs(scale.hi - scale.lo) / Math.max(1, scale.categories.length) / 2;
  return brush.values.map((v) => scale.toPx(v)).filter(Number.isFinite).map((px) => [px - half * 0.8, px + half * 0.8]);
}
