import { describe, expect, it } from "vitest";
import { gpusCell } from "./Jobs";

describe("the jobs table's GPUs cell", () => {
  it("says how many GPUs and which, not just an index", () => {
    expect(gpusCell({ gpu: 1, gpu_indexes: [0] })).toBe("1 · #0");
    expect(gpusCell({ gpu: 2, gpu_indexes: [2, 3] })).toBe("2 · #2,3");
    expect(gpusCell({ gpu: 2, gpu_indexes: [] })).toBe("2");
    expect(gpusCell({ gpu: 0, gpu_indexes: [] })).toBe("CPU");
  });
});

describe("a job's priority as typed", () => {
  it("is a whole number, else what it must be", async () => {
    const { parsePriority } = await import("../components/JobQueueControls");
    expect(parsePriority(" 10 ")).toBe(10);
    expect(parsePriority("-5")).toBe(-5);
    expect(parsePriority("1.5")).toBe("a whole number, like 10 or -5");
    expect(parsePriority("")).toBe("a whole number, like 10 or -5");
  });
});
