// The workspace's wire shapes (POST /api/v1/workspace/runs, /api/v1/views), from the generated
// OpenAPI types. The document leaves a run's config an untyped object (`dict` on the Python
// side): it is narrowed here to the JSON values the server flattens it to.

import type { components } from "../api/openapi";

type Schemas = components["schemas"];

export type JsonValue = number | string | boolean | null | JsonValue[] | { [key: string]: JsonValue };

/** A metric summary's point as the table uses it: a non-finite last value is a number here (NaN, ±Infinity). */
export interface MetricPoint {
  step: number | null;
  value: number | null;
}

export type WorkspaceMetric = Schemas["MetricCell"];

export type WorkspaceRun = Omit<Schemas["WorkspaceRun"], "config"> & {
  /** Nested configs flattened with ".", JSON types kept. */
  config: Record<string, JsonValue>;
};

export type Direction = Schemas["WorkspaceMetric"]["direction"];
export type WorkspaceMetricInfo = Schemas["WorkspaceMetric"];

export type WorkspaceReply = Omit<Schemas["WorkspaceRuns"], "runs"> & { runs: WorkspaceRun[] };
export type WorkspaceQuery = Schemas["WorkspaceQuery"];
export type SavedView = Schemas["View"];
