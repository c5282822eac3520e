// Which metric ranks a run's checkpoints when the daemon names none: an eval metric with a
// direction, else a loss, else any metric with a direction; and what a metric's ★ sets.

import type { Run, RunPrimaryMetric, RunSummary } from "../api/types";

export function primaryMetric(summary: RunSummary | undefined): { name: string; direction: "minimize" | "maximize";
  chosen: boolean } | null {
  if (!summary) return null;
  const set = summary.primary_metric;
  if (set?.direction) return { name: set.name, direction: set.direction, chosen: true };
  const entries = Object.entries(summary.metrics).filter(([, m]) => m.direction).sort(([a], [b]) => a.localeCompare(b));
  const pick = entries.find(([n]) => /^(eval|val|valid|validation|test)[/_.]/.test(n) && /loss/.test(n)) ??
    entries.find(([n]) => /^(eval|val|valid|validation|test)[/_.]/.test(n)) ??
    entries.find(([n]) => /loss/.test(n)) ?? entries[0];
  return pick ? { name: pick[0], direction: pick[1].direction as "minimize" | "maximize", chosen: false } : null;
}

/** Where a ★ in a run's view sets the primary metric: the run's experiment, else its project,
 * else globally (PUT /primary-metric takes an experiment's id, or a project's name). */
export interface PrimaryScope {
  level: "experiment" | "project" | "global";
  label: string;
  body: { experiment?: string; project?: string };
}

export function primaryScope(run: Pick<Run, "project" | "experiment" | "experiment_id">): PrimaryScope {
  if (run.experiment_id) {
    return { level: "experiment", label: `experiment ${run.experiment ?? run.experiment_id}`,
      body: { experiment: run.experiment_id } };
  }
  if (run.project) return { level: "project", label: `project ${run.project}`, body: { project: run.project } };
  return { level: "global", label: "all runs (global)", body: {} };
}

/** What clicking a metric's star does: make it primary for the scope; unset it where it is
 * primary by the scope's own setting; nothing where a wider level set it (unset it there). */
export interface StarAction {
  on: boolean;
  kind: "set" | "clear" | "none";
  title: string;
}

export function starAction(name: string, primary: RunPrimaryMetric | null | undefined, scope: PrimaryScope): StarAction {
  if (primary?.name !== name) {
    return { on: false, kind: "set", title: `Make ${name} the primary metric of ${scope.label}: it ranks the checkpoints` };
  }
  if (primary.source === scope.level) {
    return { on: true, kind: "clear", title: `${name} is the primary metric of ${scope.label}; click to unset it` };
  }
  const where = primary.source === "global" ? "globally" : `on the ${primary.source}`;
  return { on: true, kind: "none", title: `${name} is the primary metric, set ${where}` };
}

/** Every level a run's metric can be made primary at, narrowest first: its experiment, its
 * project, and globally (the levels the run has). */
export function primaryLevels(run: Pick<Run, "project" | "experiment" | "experiment_id">): PrimaryScope[] {
  const levels: PrimaryScope[] = [];
  if (run.experiment_id) {
    levels.push({ level: "experiment", label: `experiment ${run.experiment ?? run.experiment_id}`, body: { experiment: run.experiment_id } });
  }
  if (run.project) levels.push({ level: "project", label: `project ${run.project}`, body: { project: run.project } });
  levels.push({ level: "global", label: "all runs (global)", body: {} });
  return levels;
}
