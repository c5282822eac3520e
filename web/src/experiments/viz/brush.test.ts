import { describe, expect, it } from "vitest";
import { categoryLabel, passesBrushes, rangeBrush } from "./brush";
import type { VizRow } from "./types";

const row = (values: VizRow["values"]): VizRow => ({ id: "r", values });

describe("passesBrushes", () => {
  it("passes every row when nothing is brushed", () => {
    expect(passesBrushes(row({ lr: null }), {})).toBe(true);
  });

  it("keeps a number inside a range, ends included, and drops one outside", () => {
    const b = { lr: { kind: "range" as const, min: 0.001, max: 0.01 } };
    expect(passesBrushes(row({ lr: 0.001 }), b)).toBe(true);
    expect(passesBrushes(row({ lr: 0.01 }), b)).toBe(true);
    expect(passesBrushes(row({ lr: 0.02 }), b)).toBe(false);
  });

  it("drops a missing, null, string or NaN value from a range", () => {
    const b = { lr: { kind: "range" as const, min: 0, max: 1 } };
    for (const v of [null, "0.5", Number.NaN]) expect(passesBrushes(row({ lr: v }), b)).toBe(false);
    expect(passesBrushes(row({}), b)).toBe(false);
  });

  it("matches a set by label, so null, a bool and a string stay apart", () => {
    const b = { opt: { kind: "set" as const, values: ["null", "adam"] } };
    expect(passesBrushes(row({ opt: null }), b)).toBe(true);
    expect(passesBrushes(row({ opt: "adam" }), b)).toBe(true);
    expect(passesBrushes(row({ opt: "sgd" }), b)).toBe(false);
    expect(passesBrushes(row({ opt: false }), { opt: { kind: "set", values: ["false"] } })).toBe(true);
    expect(passesBrushes(row({ opt: "false" }), { opt: { kind: "set", values: ["null"] } })).toBe(false);
  });

  it("ANDs several brushed axes", () => {
    const b = { lr: { kind: "range" as const, min: 0, max: 1 }, opt: { kind: "set" as const, values: ["adam"] } };
    expect(passesBrushes(row({ lr: 0.5, opt: "adam" }), b)).toBe(true);
    expect(passesBrushes(row({ lr: 0.5, opt: "sgd" }), b)).toBe(false);
    expect(passesBrushes(row({ lr: 2, opt: "adam" }), b)).toBe(false);
  });
});

describe("brush helpers", () => {
  it("orders a range's ends and turns a click into no brush", () => {
    expect(rangeBrush(5, 2)).toEqual({ kind: "range", min: 2, max: 5 });
    expect(rangeBrush(3, 3)).toBeNull();
  });

  it("labels values as a category axis shows them", () => {
    expect([null, undefined, true, 4, "x"].map(categoryLabel)).toEqual(["null", "null", "true", "4", "x"]);
  });
});
