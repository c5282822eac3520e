import { describe, expect, it } from "vitest";
import { SeriesStore } from "../../charts/series";
import { bandOn, bandsData, groupRuns, unionX } from "./bands";

describe("group bands", () => {
  it("takes the mean with min and max around it where runs share steps", () => {
    const lines = [{ x: [0, 1, 2], y: [1, 2, 3] }, { x: [0, 1, 2], y: [3, 4, 11] }];
    const b = bandOn(unionX(lines), lines);
    expect(b.mean).toEqual([2, 3, 7]);
    expect(b.min).toEqual([1, 2, 3]);
    expect(b.max).toEqual([3, 4, 11]);
    expect(b.count).toEqual([2, 2, 2]);
  });

  it("interpolates a run between its own points and leaves it out past its end", () => {
    const lines = [{ x: [0, 10], y: [0, 10] }, { x: [0, 5], y: [4, 4] }];
    const xs = unionX(lines);
    expect(xs).toEqual([0, 5, 10]);
    const b = bandOn(xs, lines);
    expect(b.mean).toEqual([2, 4.5, 10]);
    expect(b.count).toEqual([2, 2, 1]);
    expect(b.min[2]).toBe(10);
  });

  it("skips nulls and NaN inside a run", () => {
    const b = bandOn([0, 1, 2], [{ x: [0, 1, 2], y: [0, null, 4] }, { x: [0, 1, 2], y: [0, Number.NaN, 0] }]);
    expect(b.mean).toEqual([0, 1, 2]);
  });

  it("groups runs in order, each group in its first run's colour", () => {
    expect(groupRuns([{ id: "a", color: "#111", group: "adam" }, { id: "b", color: "#222", group: "sgd" },
      { id: "c", color: "#333", group: "adam" }, { id: "d", color: "#444" }]))
      .toEqual([{ key: "adam", label: "adam", color: "#111", runs: ["a", "c"] },
        { key: "sgd", label: "sgd", color: "#222", runs: ["b"] }, { key: "", label: "(none)", color: "#444", runs: ["d"] }]);
  });

  it("lays out uPlot columns as x, then min, max and mean per group", () => {
    const store = new SeriesStore({ request: () => 0, cancel: () => undefined });
    const series = (avg: number[]) => ({ avg, min: avg, max: avg, last: avg, count: avg.map(() => 1), nan: avg.map(() => 0) });
    store.replace("a", { run_id: "a", x: [0, 1], width: 1, series: { loss: series([1, 3]) } } as never);
    store.replace("b", { run_id: "b", x: [0, 1], width: 1, series: { loss: series([3, 5]) } } as never);
    const data = bandsData(store, "loss", [{ key: "g", label: "g", color: "#000", runs: ["a", "b"] }], 0);
    expect(data).toEqual([[0, 1], [1, 3], [3, 5], [2, 4]]);
  });
});
