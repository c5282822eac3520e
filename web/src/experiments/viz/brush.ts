// Brushes as filters: a run passes when every brushed key's value is inside its brush
// (several brushed axes are an AND). Category values compare by their label, so a None,
// a bool and a string stay told apart ("null", "true", "adam").

import type { Brush, Brushes, Value, VizRow } from "./types";

/** How a value shows on a category axis and in a set brush. */
export function categoryLabel(v: Value | undefined): string {
  if (v === null || v === undefined) return "null";
  if (typeof v === "string") return v;
  return String(v);
}

export function passesBrush(v: Value | undefined, brush: Brush): boolean {
  if (brush.kind === "set") return brush.values.includes(categoryLabel(v));
  return typeof v === "number" && Number.isFinite(v) && v >= brush.min && v <= brush.max;
}

export function passesBrushes(row: VizRow, brushes: Brushes): boolean {
  for (const key in brushes) if (!passesBrush(row.values[key], brushes[key])) return false;
  return true;
}

/** A range brush with its ends in order, or null when it covers nothing (a click, not a drag). */
export function rangeBrush(a: number, b: number): Brush | null {
  if (!Number.isFinite(a) || !Number.isFinite(b) || a === b) return null;
  return { kind: "range", min: Math.min(a, b), max: Math.max(a, b) };
}
