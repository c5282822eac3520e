import { describe, expect, it } from "vitest";
import { compareValues, formatValue, kindOf } from "./columns";
import { pickSummary } from "./summary";
import { applyFilters, buildRows, configColumns, delta, differingColumns, fmtDelta, groupRows, passesFilter, sortRows } from "./table";
import { wsMetric, wsRun } from "./testRuns";
import type { WorkspaceMetricInfo } from "./types";

const LOSS: WorkspaceMetricInfo = { name: "val/loss", direction: "min", primary: true };
const ACC: WorkspaceMetricInfo = { name: "acc", direction: null, primary: false };

describe("config columns keep their types", () => {
  it("a null or an absent value does not turn a numeric column into text", () => {
    expect(kindOf([0.1, null, undefined, 3])).toBe("number");
    expect(kindOf([true, null, false])).toBe("bool");
    expect(kindOf([[1, 2], null])).toBe("list");
    expect(kindOf([1, "a"])).toBe("mixed");
    expect(kindOf([null, undefined])).toBe("empty");
    const rows = buildRows([wsRun("a", { config: { "optim.lr": 0.1 } }), wsRun("b", { config: { "optim.lr": null } }),
      wsRun("c")], [], {});
    expect(configColumns(["optim.lr"], rows)).toEqual([{ id: "c.optim.lr", label: "optim.lr", group: "config", kind: "number" }]);
    expect(rows.map((r) => formatValue(r.values["c.optim.lr"]))).toEqual(["0.1", "—", "—"]);
  });

  it("sorts numbers as numbers, null and absent last in both directions", () => {
    const rows = buildRows([wsRun("a", { config: { lr: 10 } }), wsRun("b", { config: { lr: null } }), wsRun("c", { config: { lr: 9 } }),
      wsRun("d"), wsRun("e", { config: { lr: 0.5 } })], [], {});
    expect(sortRows(rows, "c.lr").map((r) => r.run.id)).toEqual(["e", "c", "a", "b", "d"]);
    expect(sortRows(rows, "-c.lr").map((r) => r.run.id)).toEqual(["a", "c", "e", "b", "d"]);
    expect(compareValues(false, true)).toBeLessThan(0);
    expect(compareValues("run-2", "run-10")).toBeLessThan(0);
  });
});

describe("a metric column's summary", () => {
  const m = wsMetric([100, 0.5], [40, 0.2], [0, 2.0]);
  it("is the last, min, max or best by direction, with its step", () => {
    expect(pickSummary(m, "last", "min")).toEqual({ step: 100, value: 0.5 });
    expect(pickSummary(m, "min", null)).toEqual({ step: 40, value: 0.2 });
    expect(pickSummary(m, "max", null)).toEqual({ step: 0, value: 2.0 });
    expect(pickSummary(m, "best", "min")).toEqual({ step: 40, value: 0.2 });
    expect(pickSummary(m, "best", "max")).toEqual({ step: 0, value: 2.0 });
    expect(pickSummary(m, "best", null)).toEqual({ step: 100, value: 0.5 });
    expect(pickSummary(wsMetric([1, 1], [1, 1], [1, 1], [7, 0.9]), "best", "max")).toEqual({ step: 7, value: 0.9 });
    expect(pickSummary(undefined, "last", null)).toBeNull();
  });

  it("reads a non-finite last value (sent as a string) as a number, and sorts a NaN last", () => {
    const diverged = { count: 3, last: { step: 3, value: "NaN" as const }, min: { step: 1, value: 0.5 }, max: { step: 2, value: 9 }, best: null };
    const inf = { ...diverged, last: { step: 3, value: "-Infinity" as const } };
    expect(pickSummary(diverged, "last", null)?.value).toBeNaN();
    expect(pickSummary(inf, "last", null)).toEqual({ step: 3, value: -Infinity });
    const rows = buildRows([wsRun("a", { metrics: { acc: diverged } }), wsRun("b", { metrics: { acc: wsMetric([1, 2], [1, 2], [1, 2]) } }),
      wsRun("c", { metrics: { acc: inf } })], [ACC], {});
    expect(sortRows(rows, "m.acc").map((r) => r.run.id)).toEqual(["c", "b", "a"]);
    expect(sortRows(rows, "-m.acc").map((r) => r.run.id)).toEqual(["b", "c", "a"]);
    expect(formatValue(rows[0].values["m.acc"])).toBe("NaN");
  });

  it("defaults to best where the metric has a direction, last where not; a choice overrides", () => {
    const runs = [wsRun("a", { metrics: { "val/loss": m, acc: wsMetric([9, 0.7], [1, 0.1], [5, 0.8]) } })];
    const [row] = buildRows(runs, [LOSS, ACC], {});
    expect([row.values["m.val/loss"], row.steps["m.val/loss"], row.values["m.acc"]]).toEqual([0.2, 40, 0.7]);
    const [chosen] = buildRows(runs, [LOSS, ACC], { "val/loss": "last", acc: "max" });
    expect([chosen.values["m.val/loss"], chosen.steps["m.acc"], chosen.values["m.acc"]]).toEqual([0.5, 5, 0.8]);
  });
});

describe("filters", () => {
  const rows = buildRows([
    wsRun("a", { status: "RUNNING", config: { lr: 0.1, opt: "adam" } }),
    wsRun("b", { status: "FAILED", config: { lr: 0.01, opt: "sgd" } }),
    wsRun("c", { status: "SUCCEEDED", config: { lr: null, opt: "adamw" } }),
  ], [], {});
  const ids = (f: Parameters<typeof applyFilters>[1]) => applyFilters(rows, f).map((r) => r.run.id);

  it("a numeric range is inclusive, open at a null end, and leaves out null cells", () => {
    expect(ids({ "c.lr": { kind: "range", min: 0.01, max: 0.1 } })).toEqual(["a", "b"]);
    expect(ids({ "c.lr": { kind: "range", min: null, max: 0.05 } })).toEqual(["b"]);
    expect(passesFilter("0.05", { kind: "range", min: 0, max: 1 })).toBe(false);
  });

  it("text contains ignores case; a status set keeps the named states; filters combine", () => {
    expect(ids({ "c.opt": { kind: "text", text: "ADAM" } })).toEqual(["a", "c"]);
    expect(ids({ status: { kind: "set", values: ["RUNNING", "FAILED"] } })).toEqual(["a", "b"]);
    expect(ids({ status: { kind: "set", values: ["RUNNING", "FAILED"] }, "c.opt": { kind: "text", text: "sgd" } })).toEqual(["b"]);
    expect(ids({ "c.lr": { kind: "set", values: ["null"] } })).toEqual(["c"]);
  });
});

describe("groups, diffs and the baseline", () => {
  const metric = (v: number) => ({ "val/loss": wsMetric([10, v], [5, v], [0, v + 1]) });
  const rows = buildRows([
    wsRun("a", { config: { opt: "adam", lr: 0.1, seed: 1 }, metrics: metric(0.2) }),
    wsRun("b", { config: { opt: "sgd", lr: 0.1, seed: 1 }, metrics: metric(0.5) }),
    wsRun("c", { config: { opt: "adam", lr: 0.1, seed: 1 }, metrics: metric(0.4) }),
    wsRun("d", { config: { opt: null, lr: 0.1 }, metrics: {} }),
  ], [LOSS], {});

  it("groups by a config value with mean, min and max per metric; runs without the metric do not count", () => {
    const groups = groupRows(rows, "c.opt", ["m.val/loss"]);
    expect(groups.map((g) => [g.key, g.rows.map((r) => r.run.id)])).toEqual([["adam", ["a", "c"]], ["sgd", ["b"]], ["null", ["d"]]]);
    const adam = groups[0].stats["m.val/loss"]!;
    expect([adam.n, adam.min, adam.max]).toEqual([2, 0.2, 0.4]);
    expect(adam.mean).toBeCloseTo(0.3, 12);
    expect(groups[2].stats["m.val/loss"]).toBeNull();
  });

  it("diff-only keeps the keys whose values differ, an absent key counting as a value", () => {
    expect(differingColumns(rows, ["c.opt", "c.lr", "c.seed"])).toEqual(["c.opt", "c.seed"]);
    expect(differingColumns(rows.slice(0, 1), ["c.opt"])).toEqual([]);
    expect(differingColumns([rows[0], rows[2]], ["c.opt", "c.lr"])).toEqual([]);
  });

  it("deltas against the baseline are numeric only, signed", () => {
    expect(delta(0.5, 0.2)).toBeCloseTo(0.3, 12);
    expect(delta("adam", "sgd")).toBeNull();
    expect(delta(1, null)).toBeNull();
    expect([fmtDelta(0.25), fmtDelta(-3), fmtDelta(0)]).toEqual(["+0.25", "−3", "="]);
  });
});
