// Exponential moving average as TensorBoard draws it: debiased, so the first points are
// not pulled toward zero, and null-preserving, so gaps stay gaps.

export type Column = (number | null | undefined)[];

/**
 * Smooth `values` with weight `weight` in [0, 1): 0 returns a copy, 0.99 is very smooth.
 * Non-finite values (null, NaN, Infinity) are passed through as null and do not move the average.
 */
export function ema(values: Column, weight: number): (number | null)[] {
  const w = Math.min(Math.max(weight, 0), 0.999);
  const out: (number | null)[] = new Array(values.length);
  let last = 0;
  let debias = 0;
  for (let i = 0; i < values.length; i++) {
    const v = values[i];
    if (v === null || v === undefined || !Number.isFinite(v)) {
      out[i] = null;
      continue;
    }
    if (w === 0) {
      out[i] = v;
      continue;
    }
    last = last * w + (1 - w) * v;
    debias = debias * w + (1 - w);
    out[i] = last / debias;
  }
  return out;
}
