import { describe, expect, it } from "vitest";
import { evidenceLink } from "./diagnosis";

describe("evidenceLink", () => {
  it("a metric's steps zoom the run's chart to them", () => {
    expect(evidenceLink({ kind: "metric", run_id: "run_A", name: "train/loss", steps: [100, 250] }, "run_A"))
      .toEqual({ to: "/runs/run_A?tab=metrics&m=train%2Floss&xr=100..250", label: "train/loss steps 100–250" });
    expect(evidenceLink({ kind: "metric", name: "loss", steps: [7, 7] }, "run_B").to).toBe("/runs/run_B?tab=metrics&m=loss&xr=6..8");
  });

  it("log lines open the job's log at the first of them", () => {
    expect(evidenceLink({ kind: "log", job_id: "job_1", attempt: 2, stream: "stderr", offsets: [0, 10],
      lines: ["CUDA out of memory. Tried", "x"] }, "run_A"))
      .toEqual({ to: "/jobs/job_1?stream=stderr&attempt=2&q=CUDA%20out%20of%20memory.%20Tried", label: "stderr: CUDA out of memory. Tried" });
  });

  it("GPU samples, events and checkpoints; an unknown kind is plain text", () => {
    expect(evidenceLink({ kind: "gpu", node_id: "nd_1", gpu: 0, name: "util" }, "r").to).toBe("/nodes?node=nd_1");
    expect(evidenceLink({ kind: "event", id: "ev_1" }, "r")).toEqual({ to: "/runs/r?tab=events", label: "event ev_1" });
    expect(evidenceLink({ kind: "checkpoint", id: "ck_1" }, "r").to).toBe("/runs/r?tab=checkpoints");
    expect(evidenceLink({ kind: "other" }, "r")).toEqual({ to: null, label: "other" });
  });
});
