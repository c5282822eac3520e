// Helpers over runs: display names, config values and sorting for the Runs table.

import type { Run, RunSummary } from "../api/types";

export function runLabel(run: Pick<Run, "id" | "name"> | undefined, id?: string): string {
  if (run?.name) return run.name;
  const rid = run?.id ?? id ?? "";
  return rid.length > 12 ? `run …${rid.slice(-6)}` : rid;
}

/** Flatten a config to dotted keys with scalar values: {"optim": {"lr": 1}} -> {"optim.lr": 1}. */
export function flatConfig(config: Record<string, unknown> | null | undefined, prefix = ""): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  if (!config) return out;
  for (const [k, v] of Object.entries(config)) {
    const key = prefix ? `${prefix}.${k}` : k;
    if (v && typeof v === "object" && !Array.isArray(v)) Object.assign(out, flatConfig(v as Record<string, unknown>, key));
    else out[key] = v;
  }
  return out;
}

/** Config keys whose values differ between runs (the interesting ones), at most `max`. */
export function varyingConfigKeys(runs: readonly Run[], max = 4): string[] {
  const values = new Map<string, Set<string>>();
  let withConfig = 0;
  for (const run of runs) {
    if (!run.config) continue;
    withConfig++;
    for (const [k, v] of Object.entries(flatConfig(run.config))) {
      let set = values.get(k);
      if (!set) values.set(k, (set = new Set()));
      set.add(JSON.stringify(v));
    }
  }
  if (!withConfig) return [];
  const keys = [...values.entries()].sort((a, b) => b[1].size - a[1].size || a[0].localeCompare(b[0]));
  const varying = keys.filter(([, s]) => s.size > 1).map(([k]) => k);
  return (varying.length ? varying : keys.map(([k]) => k)).slice(0, max);
}

export type SortKey = string; // "created" | "name" | "status" | "project" | "m:<metric>" | "c:<config key>", "-" prefix: descending

export function sortRuns(runs: readonly Run[], sort: SortKey, summaries: Map<string, RunSummary>): Run[] {
  const desc = sort.startsWith("-");
  const key = desc ? sort.slice(1) : sort;
  const value = (r: Run): string | number | null => {
    if (key === "created") return r.created_at;
    if (key === "name") return runLabel(r).toLowerCase();
    if (key === "status") return r.status;
    if (key === "project") return r.project ?? null;
    if (key === "experiment") return r.experiment ?? null;
    if (key === "duration") return r.started_at ? (r.finished_at ?? Date.now()) - r.started_at : null;
    if (key === "step") return summaries.get(r.id)?.progress.step ?? null;
    if (key.startsWith("m:")) return summaries.get(r.id)?.metrics[key.slice(2)]?.latest?.value ?? null;
    if (key.startsWith("b:")) return summaries.get(r.id)?.metrics[key.slice(2)]?.best?.value ?? null;
    if (key.startsWith("c:")) {
      const v = flatConfig(r.config)[key.slice(2)];
      return typeof v === "number" || typeof v === "string" ? v : v === undefined ? null : JSON.stringify(v);
    }
    return null;
  };
  return [...runs].sort((a, b) => {
    const va = value(a);
    const vb = value(b);
    // Missing values go last whichever the direction.
    if (va === null && vb === null) return 0;
    if (va === null) return 1;
    if (vb === null) return -1;
    const c = typeof va === "number" && typeof vb === "number" ? va - vb : String(va).localeCompare(String(vb));
    return desc ? -c : c;
  });
}
