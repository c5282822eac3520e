import { describe, expect, it } from "vitest";
import type { GpuEvent } from "../api/types";
import { compareMarks } from "./marks";

const ev = (type: string, severity: "info" | "warning" | "critical", step: number | null, ts = 1000): GpuEvent =>
  ({ id: `${type}-${step}`, ts, type, severity, node_id: null, job_id: null, run_id: "r", step, message: null, context: {} }) as GpuEvent;

describe("compareMarks", () => {
  it("each run's warnings, criticals and checkpoints, in its color, by step or time", () => {
    const events = new Map([["a", [ev("LOSS_SPIKE", "warning", 50), ev("USER_EVENT", "info", 10), ev("CHECKPOINT_CREATED", "info", 20)]],
      ["b", [ev("LOSS_NAN", "critical", 30), ev("RUN_STALLED", "warning", null)]]]);
    const colors = new Map([["a", "#111"], ["b", "#222"]]);
    const labels = new Map([["a", "first"], ["b", "second"]]);
    expect(compareMarks(events, colors, labels, "step")).toEqual([
      { x: 20, color: "#111", label: "CHECKPOINT_CREATED · first", critical: false },
      { x: 30, color: "#222", label: "LOSS_NAN · second", critical: true },
      { x: 50, color: "#111", label: "LOSS_SPIKE · first", critical: false },
    ]);
    expect(compareMarks(events, colors, labels, "ts").length).toBe(4); // the step-less event has a time
  });
});
