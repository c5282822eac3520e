// The shapes the Experiments workspace hands its charts (see the contract in index.ts):
// a row per run with its config values and metric summaries under one flat key space
// ("optim.lr", "metric:val/loss"), axes over those keys, and the brushes set on them.

export type Value = number | string | boolean | null;

export interface Axis {
  key: string;
  label: string;
  kind: "linear" | "log" | "category";
  /** The category axis's values in order (labels as categoryLabel() writes them); absent: the rows' own, sorted. */
  categories?: string[];
}

export interface VizRow {
  id: string;
  values: Record<string, Value>;
}

export type Brush = { kind: "range"; min: number; max: number } | { kind: "set"; values: string[] };
export type Brushes = Record<string, Brush>;
