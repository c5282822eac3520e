// The ★ on a workspace panel: makes the metric the primary one of what the workspace looks
// at (its one experiment, a sweep's experiment, or its one project), through PUT
// /primary-metric, or unsets it there. Shown only where the selection names one such scope.

import { usePrimaryPut } from "../components/PrimaryStar";
import type { PrimaryScope } from "../lib/primary";
import type { WorkspaceRun } from "./types";

/** Where a ★ sets the primary metric: the one experiment selected (or the sweep's), else the one project; else nowhere. */
export function workspaceScope(sel: { p: string[]; e: string[]; sweep: string }, runs: readonly WorkspaceRun[]): PrimaryScope | null {
  const named = (id: string) => runs.find((r) => r.experiment_id === id);
  const experiment = (id: string): PrimaryScope => {
    const run = named(id);
    return { level: "experiment", label: `experiment ${run?.experiment ?? id}`, body: { experiment: id } };
  };
  if (sel.sweep) {
    const ids = [...new Set(runs.map((r) => r.experiment_id).filter((id): id is string => !!id))];
    return ids.length === 1 ? experiment(ids[0]) : null;
  }
  if (sel.e.length === 1 && !sel.p.length) return experiment(sel.e[0]);
  if (sel.p.length === 1 && !sel.e.length) return { level: "project", label: `project ${sel.p[0]}`, body: { project: sel.p[0] } };
  return null;
}

export function MetricStar({ name, primary, scope, onChanged }: {
  name: string; primary: string | null; scope: PrimaryScope; onChanged: () => void }) {
  const { busy, error, put } = usePrimaryPut(onChanged);
  const on = primary === name;
  const click = () => put(on ? null : name, scope);
  return (
    <>
      <button type="button" className={on ? "star-btn on" : "star-btn"} aria-pressed={on} disabled={busy} onClick={click}
        aria-label={`${name}: primary metric of ${scope.label}`}
        title={on ? `${name} is the primary metric; click to unset it for ${scope.label}` : `Make ${name} the primary metric of ${scope.label}`}>
        {on ? "★" : "☆"}
      </button>
      {error && <span className="text-bad small" role="alert">{error}</span>}
    </>
  );
}
