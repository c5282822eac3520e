import { describe, expect, it } from "vitest";
import { eta, importance, ranks, spearman } from "./importance";
import type { VizRow } from "./types";

// A small deterministic generator (mulberry32), so "unrelated" is the same every run.
function rng(seed: number): () => number {
  let a = seed;
  return () => {
    a = (a + 0x6d2b79f5) | 0;
    let t = Math.imul(a ^ (a >>> 15), 1 | a);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

describe("the statistics", () => {
  it("ranks ties by their mean position", () => {
    expect(ranks([10, 20, 10, 30])).toEqual([0.5, 2, 0.5, 3]);
  });

  it("gives |rho| 1 for any monotonic relation", () => {
    const x = [1, 2, 3, 4, 5, 6];
    expect(spearman(x, x.map((v) => v ** 3))).toBeCloseTo(1);
    expect(spearman(x, x.map((v) => -Math.exp(v)))).toBeCloseTo(-1);
  });

  it("gives eta 1 when the group fixes the value, 0 when group means are equal", () => {
    expect(eta(["a", "a", "b", "b"], [1, 1, 5, 5]).score).toBeCloseTo(1);
    expect(eta(["a", "a", "b", "b"], [1, 5, 5, 1]).score).toBeCloseTo(0);
  });
});

describe("importance", () => {
  const random = rng(7);
  const optimizers = ["adam", "sgd", "lion", null];
  const rows: VizRow[] = Array.from({ length: 200 }, (_, i) => {
    const opt = optimizers[i % 4];
    const lr = 10 ** (-4 + 3 * random());
    return {
      id: `r${i}`,
      values: {
        opt, lr, seed: Math.floor(random() * 1e6), warm: random() < 0.5,
        // The loss is fixed by the optimizer and rises with the learning rate.
        "metric:loss": optimizers.indexOf(opt) * 10 + lr,
      },
    };
  });

  it("scores a key that fixes the target ~1 and an unrelated one ~0", () => {
    const target = rows.map((r) => ({ id: r.id, values: { ...r.values, "metric:loss": optimizers.indexOf(r.values.opt as string | null) } }));
    const [opt, seed, warm] = importance(target, ["opt", "seed", "warm"], "metric:loss", "min");
    expect(opt).toMatchObject({ key: "opt", method: "eta", trialsPerValue: 50, insufficient: false });
    expect(opt.score).toBeCloseTo(1);
    expect(seed.method).toBe("spearman");
    expect(seed.score!).toBeLessThan(0.15);
    expect(warm.method).toBe("eta");
    expect(warm.score!).toBeLessThan(0.15);
  });

  it("scores a numeric key by rank, and says which way is better by the direction", () => {
    const lrOnly = rows.map((r) => ({ id: r.id, values: { lr: r.values.lr, "metric:loss": Math.log(r.values.lr as number) } }));
    const [min] = importance(lrOnly, ["lr"], "metric:loss", "min");
    expect(min.score).toBeCloseTo(1);
    expect(min.better).toBe("lower");
    expect(min.trialsPerValue).toBe(50);
    expect(importance(lrOnly, ["lr"], "metric:loss", "max")[0].better).toBe("higher");
    expect(importance(lrOnly, ["lr"], "metric:loss", null)[0].better).toBeNull();
  });

  it("flags fewer than 5 trials per value as insufficient", () => {
    const few = rows.slice(0, 16); // 4 per optimizer, 4 per lr quartile
    const [opt, lr] = importance(few, ["opt", "lr"], "metric:loss", "min");
    expect(opt).toMatchObject({ trialsPerValue: 4, insufficient: true });
    expect(lr).toMatchObject({ trialsPerValue: 4, insufficient: true });
    const [enough] = importance(rows.slice(0, 20), ["opt"], "metric:loss", "min");
    expect(enough).toMatchObject({ trialsPerValue: 5, insufficient: false });
  });

  it("leaves runs without the target out, and has no score for a constant key", () => {
    const partial: VizRow[] = [...rows.slice(0, 20), { id: "x", values: { opt: "new", "metric:loss": null } }];
    expect(importance(partial, ["opt"], "metric:loss", "min")[0].trialsPerValue).toBe(5);
    const constant = rows.map((r) => ({ id: r.id, values: { k: "same", "metric:loss": r.values["metric:loss"] } }));
    expect(importance(constant, ["k"], "metric:loss", "min")[0].score).toBeNull();
  });
});
