// Checkpoints and evaluations as the pages show them, from GET /runs/{id}/checkpoints and
// GET /experiments/{id}/evaluations. Pure. Every field past the first listing's (id, step,
// path, size) is optional: older daemons lack fingerprints, lineage, metrics or evaluations,
// and a row shows what it has.

import type { CheckpointEvaluation, CheckpointList, CheckpointMetric, Evaluation } from "../api/types";

export type Value = number | string | null;

export interface MetricCell {
  name: string;
  value: Value;
  step: number | null;
}

export interface EvaluationCell {
  id: string;
  label: string; // suite / dataset@version, or "evaluation"
  status: string;
  metrics: MetricCell[];
}

export interface CheckpointRow {
  id: string;
  step: number | null;
  epoch: number | null;
  path: string;
  size: number | null;
  fingerprint: string | null; // short: "sha1:1a2b3c4d"
  fullFingerprint: string | null;
  parent: { id: string; step: number | null } | null; // step null: a checkpoint of another run
  metricValue: Value | undefined; // the ranking metric's value (undefined: not ranked)
  metrics: MetricCell[]; // the values nearest its step, primary first
  evaluations: EvaluationCell[];
  best: boolean;
  deleted: boolean;
  source: string | null; // watcher, import, or the SDK's (null)
  created: number;
}

/** A value for people: finite numbers as they are, "NaN" and infinities as written, null "—". */
export function valueText(v: Value | undefined, fmt: (n: number) => string): string {
  if (v === null || v === undefined) return "—";
  if (typeof v === "number") return Number.isFinite(v) ? fmt(v) : String(v);
  return v;
}

export function shortFingerprint(fp: string | null | undefined): string | null {
  if (!fp) return null;
  const [algo, hex] = fp.includes(":") ? fp.split(":", 2) : ["", fp];
  return `${algo ? `${algo}:` : ""}${hex.slice(0, 8)}`;
}

/** Metrics as a list (a checkpoint's) or name -> value (an evaluation's), primary first. */
export function metricCells(metrics: readonly CheckpointMetric[] | Record<string, Value> | null | undefined,
  primary: string | null): MetricCell[] {
  if (!metrics) return [];
  const cells: MetricCell[] = Array.isArray(metrics)
    ? metrics.filter((m) => m && typeof m.name === "string").map((m) => ({ name: m.name, value: m.value ?? null, step: m.step ?? null }))
    : Object.entries(metrics).map(([name, value]) => ({ name, value: value ?? null, step: null }));
  if (primary) {
    const at = cells.findIndex((c) => c.name === primary);
    if (at > 0) cells.unshift(...cells.splice(at, 1));
  }
  return cells;
}

export function evaluationLabel(e: Pick<Evaluation, "suite" | "dataset"> & Partial<Pick<Evaluation, "dataset_version" | "name">>): string {
  const data = e.dataset ? `${e.dataset}${e.dataset_version ? `@${e.dataset_version}` : ""}` : "";
  return [e.suite, data].filter(Boolean).join(" / ") || e.name || "evaluation";
}

export function evaluationCell(e: Evaluation | CheckpointEvaluation): EvaluationCell {
  return { id: e.id, label: evaluationLabel(e), status: e.status, metrics: metricCells(e.metrics ?? null, null) };
}

/** The listing's rows, newest step first, with the best marked and each parent named by its step. */
export function checkpointRows(list: CheckpointList): CheckpointRow[] {
  const byId = new Map(list.checkpoints.map((c) => [c.id, c]));
  const rows = list.checkpoints.map((c): CheckpointRow => {
    const parent = c.parent_id ? { id: c.parent_id, step: byId.get(c.parent_id)?.step ?? null } : null;
    const source = c.metadata && typeof c.metadata.source === "string" ? c.metadata.source : null;
    return {
      id: c.id, step: c.step, epoch: c.epoch ?? null, path: c.path, size: c.size_bytes,
      fingerprint: shortFingerprint(c.fingerprint), fullFingerprint: c.fingerprint ?? null, parent,
      metricValue: list.metric ? (c.metric_value ?? null) : undefined,
      metrics: metricCells(c.metrics, list.metric),
      evaluations: (c.evaluations ?? []).map(evaluationCell),
      best: !!c.best || (list.best_id !== null && c.id === list.best_id),
      deleted: c.deleted_at !== null && c.deleted_at !== undefined,
      source, created: c.created_at,
    };
  });
  return rows.sort((a, b) => (b.step ?? -1) - (a.step ?? -1));
}

/** The metric columns of an evaluations table: every name any row has, in first-seen order. */
export function evaluationColumns(evals: Evaluation[]): string[] {
  const seen = new Set<string>();
  for (const e of evals) for (const name of Object.keys(e.metrics ?? {})) seen.add(name);
  return [...seen];
}

/** Where the run's points came from, in words: "TensorBoard", "SDK", "TensorBoard + SDK"; null: unknown or none. */
export function metricSourceLabel(sources: readonly string[] | null | undefined): string | null {
  if (!sources?.length) return null;
  const names: Record<string, string> = { tensorboard: "TensorBoard", sdk: "SDK" };
  const known = ["tensorboard", "sdk"].filter((s) => sources.includes(s)).map((s) => names[s]);
  const other = sources.filter((s) => !(s in names));
  return [...known, ...other].join(" + ");
}
