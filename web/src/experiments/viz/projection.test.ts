import { describe, expect, it } from "vitest";
import { axisAt, axisXs, nearestRow, project } from "./projection";
import { brushFromDrag, brushSpans, categoriesOf, makeScale, niceTicks } from "./scale";
import type { Axis, VizRow } from "./types";

const rows: VizRow[] = [
  { id: "a", values: { lr: 0.001, layers: 2, opt: "adam", "metric:loss": 1 } },
  { id: "b", values: { lr: 0.01, layers: 4, opt: "sgd", "metric:loss": 2 } },
  { id: "c", values: { lr: 0.1, layers: 8, opt: null, "metric:loss": 3 } },
];
const axes: Axis[] = [
  { key: "lr", label: "lr", kind: "log" },
  { key: "layers", label: "layers", kind: "linear" },
  { key: "opt", label: "opt", kind: "category" },
  { key: "metric:loss", label: "loss", kind: "linear" },
];
const layout = { width: 400, height: 220, top: 20, bottom: 0, left: 0, right: 0 };

describe("scales", () => {
  it("puts the smallest value at the bottom and the largest at the top of a linear axis", () => {
    const s = makeScale(axes[1], rows, 200, 0);
    expect(s.toPx(2)).toBe(200);
    expect(s.toPx(8)).toBe(0);
    expect(s.toPx(5)).toBe(100);
    expect(s.fromPx(100)).toBe(5);
  });

  it("spaces decades evenly on a log axis and gives no place to 0 or a string", () => {
    const s = makeScale(axes[0], rows, 200, 0);
    expect(s.toPx(0.01)).toBeCloseTo(100);
    expect(s.fromPx(100)).toBeCloseTo(0.01);
    expect(s.toPx(0)).toBeNaN();
    expect(s.toPx("x")).toBeNaN();
    expect(s.ticks().map((t) => t.label)).toEqual(["0.001", "0.01", "0.1"]);
    // Under two decades, the 2s and 5s too.
    const narrow = makeScale(axes[0], rows.slice(0, 2), 200, 0);
    expect(narrow.ticks().map((t) => t.label)).toEqual(["0.001", "0.002", "0.005", "0.01"]);
  });

  it("centres a single value instead of dividing by zero", () => {
    const s = makeScale(axes[1], [rows[0]], 200, 0);
    expect(s.toPx(2)).toBeCloseTo(100);
  });

  it("orders categories: numbers by value, then the rest by name, null included", () => {
    const mixed: VizRow[] = [10, 9, "b", null, "a", true].map((v, i) => ({ id: String(i), values: { k: v } }));
    expect(categoriesOf(mixed, "k")).toEqual(["9", "10", "a", "b", "null", "true"]);
    const s = makeScale({ key: "k", label: "k", kind: "category" }, mixed, 60, 0);
    expect(s.toPx(9)).toBe(55);
    expect(s.toPx(true)).toBe(5);
  });

  it("makes round ticks", () => {
    expect(niceTicks(0, 1, 5)).toEqual([0, 0.2, 0.4, 0.6, 0.8, 1]);
  });
});

describe("brushes from drags", () => {
  it("turns a drag on a numeric axis into the range of values it spans, either way", () => {
    const s = makeScale(axes[1], rows, 200, 0);
    expect(brushFromDrag(s, 150, 50)).toEqual({ kind: "range", min: 3.5, max: 6.5 });
    expect(brushFromDrag(s, 50, 150)).toEqual({ kind: "range", min: 3.5, max: 6.5 });
    expect(brushFromDrag(s, 50, 51)).toBeNull(); // a click clears
  });

  it("turns a drag on a category axis into the set of categories it covers", () => {
    const s = makeScale(axes[2], rows, 300, 0); // adam 250, null 150, sgd 50
    expect(brushFromDrag(s, 290, 120)).toEqual({ kind: "set", values: ["adam", "null"] });
    expect(brushFromDrag(s, 230, 170)).toBeNull();
  });

  it("draws a brush where its values sit, clamped to the axis", () => {
    const s = makeScale(axes[1], rows, 200, 0);
    expect(brushSpans(s, { kind: "range", min: 5, max: 100 })).toEqual([[0, 100]]);
    const c = makeScale(axes[2], rows, 300, 0);
    expect(brushSpans(c, { kind: "set", values: ["sgd"] })).toEqual([[10, 90]]);
  });
});

describe("projection and hit tests", () => {
  it("precomputes every run's pixel on every axis, NaN where it has no value", () => {
    const p = project(axes, [...rows, { id: "d", values: { lr: "oops" } }], layout);
    expect(p.xs).toEqual([0, 400 / 3, 800 / 3, 400]);
    [220, 220, 220 - 200 / 6, 220].forEach((y, a) => expect(p.ys[a]).toBeCloseTo(y, 3));
    expect(p.ys[4 + 3]).toBe(120); // b's loss: the middle
    expect(Number.isNaN(p.ys[12])).toBe(true); // d's lr is a string on a log axis
    expect(Number.isNaN(p.ys[13])).toBe(true);
  });

  it("finds the axis under the pointer only within reach", () => {
    expect(axisAt(axisXs(3, 0, 200), 96)).toBe(1);
    expect(axisAt(axisXs(3, 0, 200), 60)).toBe(-1);
  });

  it("finds the line nearest the pointer between two axes, and none far from every line", () => {
    const p = project(axes, rows, layout);
    // Between axis 0 and 1, halfway: a at 220, b at 220 - 100 - 200/6 / 2 ...; read b's midpoint.
    const mid = (p.ys[4] + p.ys[5]) / 2;
    expect(nearestRow(p, p.xs[0] / 2 + p.xs[1] / 2, mid + 2)).toBe(1);
    expect(nearestRow(p, 10, 70, 4)).toBe(-1);
    // A row left out by the filter is not hit.
    expect(nearestRow(p, p.xs[0] / 2 + p.xs[1] / 2, mid, 6, (r) => r !== 1)).not.toBe(1);
  });
});
