// The runs table's columns: the run's own fields, its flattened config keys (typed by the
// values they hold, so a null never turns a numeric column into strings) and its metrics.
// A column's id is also its key in the URL, in brushes and in the charts' rows.

import { fmtValue } from "../lib/format";
import type { JsonValue } from "./types";

export type ColumnKind = "number" | "string" | "bool" | "list" | "mixed" | "empty";
export type ColumnGroup = "run" | "config" | "metric";

export interface Column {
  id: string;
  label: string;
  group: ColumnGroup;
  kind: ColumnKind | "status" | "tags" | "time";
}

/** A cell's value: a config value as stored, a metric's chosen summary, or undefined where the run has none. */
export type CellValue = JsonValue | undefined;

export const RUN_COLUMNS: Column[] = [
  { id: "status", label: "Status", group: "run", kind: "status" },
  { id: "name", label: "Name", group: "run", kind: "string" },
  { id: "tags", label: "Tags", group: "run", kind: "tags" },
  { id: "created", label: "Created", group: "run", kind: "time" },
];

export const configId = (key: string) => `c.${key}`;
export const metricId = (name: string) => `m.${name}`;

/** The config key or metric name a column id stands for. */
export function columnSource(id: string): { group: ColumnGroup; name: string } {
  if (id.startsWith("c.")) return { group: "config", name: id.slice(2) };
  if (id.startsWith("m.")) return { group: "metric", name: id.slice(2) };
  return { group: "run", name: id };
}

/** What a config key holds across runs, nulls and absent values aside: one JSON type, or mixed. */
export function kindOf(values: Iterable<CellValue>): ColumnKind {
  let kind: ColumnKind = "empty";
  for (const v of values) {
    if (v === null || v === undefined) continue;
    const k: ColumnKind = typeof v === "number" ? "number" : typeof v === "boolean" ? "bool" : typeof v === "string" ? "string"
      : "list";
    if (kind === "empty") kind = k;
    else if (kind !== k) return "mixed";
  }
  return kind;
}

const RANK: Record<string, number> = { number: 0, boolean: 1, string: 2, object: 3 };

/** A cell with nothing to order by: null, absent, or a NaN (a metric that diverged). */
export function isMissing(v: CellValue): boolean {
  return v === null || v === undefined || (typeof v === "number" && Number.isNaN(v));
}

/** Order of two cells: numbers by value, false before true, text naturally; null, absent and NaN always last. */
export function compareValues(a: CellValue, b: CellValue): number {
  const aMissing = isMissing(a);
  const bMissing = isMissing(b);
  if (aMissing || bMissing) return aMissing === bMissing ? 0 : aMissing ? 1 : -1;
  if (typeof a !== typeof b) return RANK[typeof a] - RANK[typeof b];
  if (typeof a === "number") return a - (b as number);
  if (typeof a === "boolean") return Number(a) - Number(b as boolean);
  if (typeof a === "string") return a.localeCompare(b as string, undefined, { numeric: true });
  return JSON.stringify(a).localeCompare(JSON.stringify(b));
}

/** A value's identity for set filters, grouping and diffs: its JSON text, "" where absent. */
export function valueKey(v: CellValue): string {
  if (v === undefined) return "";
  return typeof v === "string" ? v : JSON.stringify(v);
}

/** A cell's text: "—" for null and absent, JSON for lists and objects. */
export function formatValue(v: CellValue): string {
  if (v === null || v === undefined) return "—";
  if (typeof v === "number") return fmtValue(v);
  if (typeof v === "string") return v;
  if (typeof v === "boolean") return v ? "true" : "false";
  return JSON.stringify(v);
}
