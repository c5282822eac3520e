// Workspace runs for the tests: a fixture names only what its test looks at.
import type { WorkspaceMetric, WorkspaceRun } from "./types";

export function wsRun(id: string, extra: Partial<WorkspaceRun> = {}): WorkspaceRun {
  return { id, name: id, status: "SUCCEEDED", job_id: null, project: "p", experiment: null, experiment_id: null, sweep_id: null,
    sweep_trial: null, tags: [], created_at: 1_800_000_000_000, ended_at: null, config: {}, metrics: {}, ...extra };
}

/** A metric whose last, min and max are given as [step, value]. */
export function wsMetric(last: [number, number], min: [number, number], max: [number, number],
  best: [number, number] | null = null): WorkspaceMetric {
  const pt = ([step, value]: [number, number]) => ({ step, value });
  return { count: 10, last: pt(last), min: pt(min), max: pt(max), best: best ? pt(best) : null };
}
