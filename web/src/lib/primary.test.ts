import { describe, expect, it } from "vitest";
import type { RunPrimaryMetric } from "../api/types";
import { primaryLevels, primaryScope, starAction } from "./primary";

const set = (name: string, source: RunPrimaryMetric["source"]): RunPrimaryMetric =>
  ({ name, source, direction: "minimize", count: 1, latest: null, best: null });

describe("primaryScope", () => {
  it("is the run's experiment (by id), else its project (by name), else global", () => {
    expect(primaryScope({ project: "qwen", experiment: "lr-1", experiment_id: "exp_1" }))
      .toEqual({ level: "experiment", label: "experiment lr-1", body: { experiment: "exp_1" } });
    expect(primaryScope({ project: "qwen", experiment: null, experiment_id: null }))
      .toEqual({ level: "project", label: "project qwen", body: { project: "qwen" } });
    expect(primaryScope({ project: null, experiment: null, experiment_id: null }))
      .toEqual({ level: "global", label: "all runs (global)", body: {} });
  });
});

describe("starAction", () => {
  const scope = primaryScope({ project: "qwen", experiment: "lr-1", experiment_id: "exp_1" });

  it("sets a metric that is not the primary one, for the scope", () => {
    expect(starAction("eval/acc", null, scope)).toMatchObject({ on: false, kind: "set" });
    expect(starAction("eval/acc", set("eval/loss", "experiment"), scope).title).toMatch(/of experiment lr-1/);
  });

  it("unsets the primary metric where the scope itself set it", () => {
    expect(starAction("eval/loss", set("eval/loss", "experiment"), scope)).toMatchObject({ on: true, kind: "clear" });
  });

  it("does nothing where a wider level set it, and says where", () => {
    const action = starAction("eval/loss", set("eval/loss", "project"), scope);
    expect(action).toMatchObject({ on: true, kind: "none" });
    expect(action.title).toMatch(/set on the project/);
    expect(starAction("eval/loss", set("eval/loss", "global"), scope).title).toMatch(/set globally/);
  });
});

describe("primaryLevels", () => {
  it("are the run's experiment, its project and global, the ones it has, narrowest first", () => {
    expect(primaryLevels({ project: "qwen", experiment: "lr-1", experiment_id: "exp_1" }).map((l) => [l.level, l.body])).toEqual([
      ["experiment", { experiment: "exp_1" }], ["project", { project: "qwen" }], ["global", {}]]);
    expect(primaryLevels({ project: null, experiment: null, experiment_id: null }).map((l) => l.level)).toEqual(["global"]);
  });
});
