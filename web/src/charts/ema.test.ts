import { describe, expect, it } from "vitest";
import { ema } from "./ema";

describe("ema", () => {
  it("returns the values unchanged with weight 0", () => {
    expect(ema([1, 2, 3], 0)).toEqual([1, 2, 3]);
  });

  it("is debiased: a constant series stays constant from the first point", () => {
    const out = ema([5, 5, 5, 5], 0.9);
    for (const v of out) expect(v).toBeCloseTo(5, 12);
  });

  it("matches TensorBoard's formula", () => {
    // last = last*w + (1-w)*v; debias = 1 - w^n
    const w = 0.6;
    const values = [1, 3, 2, 6];
    let last = 0;
    const expected = values.map((v, i) => {
      last = last * w + (1 - w) * v;
      return last / (1 - Math.pow(w, i + 1));
    });
    const got = ema(values, w);
    got.forEach((v, i) => expect(v).toBeCloseTo(expected[i], 12));
    expect(got[0]).toBe(1);
  });

  it("keeps gaps as gaps and does not let them move the average", () => {
    const got = ema([2, null, NaN, Infinity, 2], 0.5);
    expect(got[1]).toBeNull();
    expect(got[2]).toBeNull();
    expect(got[3]).toBeNull();
    expect(got[4]).toBeCloseTo(2, 12);
  });

  it("lags a step change more with more smoothing", () => {
    const step = [0, 0, 0, 0, 10, 10, 10];
    const light = ema(step, 0.3)[5]!;
    const heavy = ema(step, 0.9)[5]!;
    expect(light).toBeGreaterThan(heavy);
    expect(light).toBeLessThan(10);
  });
});
