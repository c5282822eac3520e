// Parameter importance for a sweep: how much of the target metric's spread each config
// key explains, from the trials alone (no model to fit, deterministic, cheap for 1,000 runs).
//
// - A category key (strings, bools, None, or numbers with few distinct values) scores the
//   correlation ratio eta = sqrt(between-group sum of squares / total sum of squares): 1
//   when the key's value fixes the target, near 0 when the groups' means are all alike.
// - A numeric key with many distinct values scores |Spearman's rho| (rank correlation): 1
//   when the target rises or falls monotonically with it, whatever the curve.
// Both are correlations on the same 0..1 scale (eta >= |r|), so the keys rank together.
// Few trials per value make both look stronger than they are (eta most of all), so a key
// with fewer than 5 trials per value (per quantile bin, for a numeric key) is flagged
// insufficient (autoresearch-ai#47; W&B's importance confuses users on exactly this).

import { categoryLabel } from "./brush";
import type { VizRow } from "./types";

export const MIN_TRIALS_PER_VALUE = 5;
/** A numeric key with more distinct values than this is ranked, not grouped. */
export const MAX_GROUPED_VALUES = 6;
/** A ranked key's trials are counted per quartile. */
export const QUANTILE_BINS = 4;

export interface ImportanceRow {
  key: string;
  /** 0..1; null when it cannot be told (fewer than 2 trials, a constant key or a constant target). */
  score: number | null;
  /** The fewest trials behind one value of the key (one quantile bin for a ranked key). */
  trialsPerValue: number;
  insufficient: boolean;
  /** How it was scored. */
  method: "eta" | "spearman";
  /** A numeric key: whether higher or lower values go with a better target (by its direction); else null. */
  better: "higher" | "lower" | null;
}

/** Average ranks (ties share the mean of their positions), 0-based. */
export function ranks(values: readonly number[]): number[] {
  const order = values.map((v, i) => [v, i] as const).sort((a, b) => a[0] - b[0]);
  const out = new Array<number>(values.length);
  for (let i = 0; i < order.length;) {
    let j = i;
    while (j + 1 < order.length && order[j + 1][0] === order[i][0]) j++;
    const rank = (i + j) / 2;
    for (let k = i; k <= j; k++) out[order[k][1]] = rank;
    i = j + 1;
  }
  return out;
}

export function pearson(a: readonly number[], b: readonly number[]): number | null {
  const n = a.length;
  if (n < 2) return null;
  let ma = 0;
  let mb = 0;
  for (let i = 0; i < n; i++) {
    ma += a[i];
    mb += b[i];
  }
  ma /= n;
  mb /= n;
  let cov = 0;
  let va = 0;
  let vb = 0;
  for (let i = 0; i < n; i++) {
    const da = a[i] - ma;
    const db = b[i] - mb;
    cov += da * db;
    va += da * da;
    vb += db * db;
  }
  if (va === 0 || vb === 0) return null;
  return cov / Math.sqrt(va * vb);
}

export function spearman(a: readonly number[], b: readonly number[]): number | null {
  return pearson(ranks(a), ranks(b));
}

/** The correlation ratio of y grouped by `groups` (parallel arrays), and the smallest group's size. */
export function eta(groups: readonly string[], y: readonly number[]): { score: number | null; smallest: number } {
  const sums = new Map<string, { sum: number; n: number }>();
  let total = 0;
  for (let i = 0; i < y.length; i++) {
    const g = sums.get(groups[i]) ?? { sum: 0, n: 0 };
    g.sum += y[i];
    g.n++;
    sums.set(groups[i], g);
    total += y[i];
  }
  const smallest = sums.size ? Math.min(...[...sums.values()].map((g) => g.n)) : 0;
  if (y.length < 2 || sums.size < 2) return { score: null, smallest };
  const mean = total / y.length;
  let ssTotal = 0;
  for (const v of y) ssTotal += (v - mean) ** 2;
  if (ssTotal === 0) return { score: null, smallest };
  let ssBetween = 0;
  for (const g of sums.values()) ssBetween += g.n * (g.sum / g.n - mean) ** 2;
  return { score: Math.sqrt(Math.min(1, ssBetween / ssTotal)), smallest };
}

function finite(v: unknown): v is number {
  return typeof v === "number" && Number.isFinite(v);
}

export function importance(rows: readonly VizRow[], keys: readonly string[], target: string,
  direction: "min" | "max" | null): ImportanceRow[] {
  const scored = rows.filter((r) => finite(r.values[target]));
  const y = scored.map((r) => r.values[target] as number);
  return keys.map((key): ImportanceRow => {
    const values = scored.map((r) => r.values[key] ?? null);
    const present = values.filter((v) => v !== null);
    const numeric = present.length > 0 && present.every(finite);
    const distinct = new Set(values.map(categoryLabel)).size;
    let better: ImportanceRow["better"] = null;
    if (numeric) {
      const xs: number[] = [];
      const ys: number[] = [];
      values.forEach((v, i) => {
        if (finite(v)) {
          xs.push(v);
          ys.push(y[i]);
        }
      });
      const rho = spearman(xs, ys);
      if (rho !== null && rho !== 0 && direction) better = (rho > 0) === (direction === "max") ? "higher" : "lower";
      if (distinct > MAX_GROUPED_VALUES) {
        const trialsPerValue = Math.floor(xs.length / QUANTILE_BINS);
        return { key, score: rho === null ? null : Math.abs(rho), trialsPerValue, method: "spearman", better,
          insufficient: trialsPerValue < MIN_TRIALS_PER_VALUE };
      }
    }
    const { score, smallest } = eta(values.map(categoryLabel), y);
    return { key, score, trialsPerValue: smallest, method: "eta", better,
      insufficient: smallest < MIN_TRIALS_PER_VALUE };
  });
}
