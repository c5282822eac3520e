import { describe, expect, it } from "vitest";
import type { Checkpoint, CheckpointList } from "../api/types";
import { checkpoint, evaluation } from "../test/wire";
import { checkpointRows, evaluationColumns, evaluationLabel, metricCells, metricSourceLabel, shortFingerprint, valueText } from "./checkpoints";

const FP = "sha1:1a2b3c4d5e6f7a8b9c0d1a2b3c4d5e6f7a8b9c0d";

function listing(extra: Partial<CheckpointList> = {}): CheckpointList {
  return {
    metric: "val/loss", direction: "minimize", best_id: "ck_2",
    checkpoints: [
      checkpoint({ id: "ck_1", run_id: "run_a", step: 100, path: "/w/step_100.pt", size_bytes: 10, created_at: 1, metric_value: 0.5,
        fingerprint: FP, metadata: { source: "watcher", kind: "file" } }),
      checkpoint({ id: "ck_2", run_id: "run_a", step: 200, path: "/w/step_200.pt", size_bytes: 20, created_at: 2, metric_value: 0.25,
        best: true, parent_id: "ck_1", fingerprint: FP,
        metrics: [{ name: "acc", value: 0.9, step: 200 }, { name: "val/loss", value: 0.25, step: 200 }],
        evaluations: [{ id: "ev_1", job_id: "job_e", suite: "mmlu", dataset: "test", metrics: { acc: 0.61 }, status: "SUCCEEDED",
          created_at: 3 }] }),
      checkpoint({ id: "ck_3", run_id: "run_a", step: 300, path: "/w/step_300.pt", size_bytes: 30, created_at: 3,
        metric_value: "NaN" as unknown as number, parent_id: "ck_2", deleted_at: 9 }),
      checkpoint({ id: "ck_0", run_id: "run_a", step: 50, path: "/w/first.pt", size_bytes: null, created_at: 0, parent_id: "ck_other_run" }),
    ],
    ...extra,
  };
}

describe("checkpointRows", () => {
  it("lists newest step first with the best marked, parents by step and deleted ones flagged", () => {
    const rows = checkpointRows(listing());
    expect(rows.map((r) => r.step)).toEqual([300, 200, 100, 50]);
    expect(rows.filter((r) => r.best).map((r) => r.id)).toEqual(["ck_2"]);
    expect(rows.map((r) => r.parent)).toEqual([{ id: "ck_2", step: 200 }, { id: "ck_1", step: 100 }, null,
      { id: "ck_other_run", step: null }]);
    expect(rows.map((r) => r.deleted)).toEqual([true, false, false, false]);
    expect(rows[1].fingerprint).toBe("sha1:1a2b3c4d");
    expect(rows[1].metrics.map((m) => m.name)).toEqual(["val/loss", "acc"]); // the ranking metric first
    expect(rows[1].evaluations).toEqual([{ id: "ev_1", label: "mmlu / test", status: "SUCCEEDED",
      metrics: [{ name: "acc", value: 0.61, step: null }] }]);
    expect(rows[2].source).toBe("watcher");
  });

  it("tolerates a listing with none of the newer fields", () => {
    const bare = { id: "ck_1", run_id: "r", step: null, path: "/p", size_bytes: 1, created_at: 5 } as Checkpoint;
    const rows = checkpointRows({ metric: null, direction: null, best_id: null, checkpoints: [bare] });
    expect(rows).toEqual([{ id: "ck_1", step: null, epoch: null, path: "/p", size: 1, fingerprint: null, fullFingerprint: null,
      parent: null, metricValue: undefined, metrics: [], evaluations: [], best: false, deleted: false, source: null, created: 5 }]);
  });

  it("marks by best_id when rows carry no best flag", () => {
    const list = listing();
    for (const c of list.checkpoints) delete c.best;
    expect(checkpointRows(list).filter((r) => r.best).map((r) => r.id)).toEqual(["ck_2"]);
  });
});

describe("the pieces", () => {
  it("reads metrics as a list or a mapping, primary first", () => {
    expect(metricCells({ acc: 0.9, loss: 0.1 }, "loss")).toEqual([{ name: "loss", value: 0.1, step: null },
      { name: "acc", value: 0.9, step: null }]);
    expect(metricCells(null, "loss")).toEqual([]);
  });

  it("words values, fingerprints, evaluations and metric sources", () => {
    expect(valueText(0.5, (n) => n.toFixed(2))).toBe("0.50");
    expect(valueText("NaN", String)).toBe("NaN");
    expect(valueText(Infinity, String)).toBe("Infinity");
    expect(valueText(null, String)).toBe("—");
    expect(shortFingerprint(FP)).toBe("sha1:1a2b3c4d");
    expect(shortFingerprint(null)).toBeNull();
    expect(evaluationLabel({ suite: null, dataset: null, dataset_version: null })).toBe("evaluation");
    expect(evaluationLabel({ suite: "s", dataset: null })).toBe("s");
    expect(evaluationLabel({ suite: "mmlu", dataset: "test", dataset_version: "v2" })).toBe("mmlu / test@v2");
    expect(evaluationColumns([evaluation({ id: "a", checkpoint_id: "c", status: "SUCCEEDED", created_at: 1, metrics: { b: 1, a: 2 } }),
      evaluation({ id: "b", checkpoint_id: "c", status: "FAILED", created_at: 1 }),
      evaluation({ id: "c", checkpoint_id: "c", status: "SUCCEEDED", created_at: 1, metrics: { c: 1, a: 1 } })])).toEqual(["b", "a", "c"]);
    expect(metricSourceLabel(["sdk", "tensorboard"])).toBe("TensorBoard + SDK");
    expect(metricSourceLabel(["tensorboard"])).toBe("TensorBoard");
    expect(metricSourceLabel(["sdk"])).toBe("SDK");
    expect(metricSourceLabel([])).toBeNull();
    expect(metricSourceLabel(undefined)).toBeNull();
  });
});
