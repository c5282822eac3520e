// The workspace's wire shapes (POST /api/v1/workspace/runs, /api/v1/views), as the contract
// with the server names them. Kept here until the generated OpenAPI types carry them.

export type JsonValue = number | string | boolean | null | JsonValue[] | { [key: string]: JsonValue };

export interface MetricPoint {
  step: number | null;
  value: number | null;
}

export interface WorkspaceMetric {
  count: number;
  last: MetricPoint | null;
  min: MetricPoint | null;
  max: MetricPoint | null;
  best: MetricPoint | null;
}

export interface WorkspaceRun {
  id: string;
  name: string | null;
  status: string;
  job_id: string | null;
  project: string | null;
  experiment: string | null;
  experiment_id: string | null;
  sweep_id: string | null;
  sweep_trial: number | null;
  tags: string[];
  created_at: number | null;
  ended_at: number | null;
  /** Nested configs flattened with ".", JSON types kept. */
  config: Record<string, JsonValue>;
  metrics: Record<string, WorkspaceMetric>;
}

export type Direction = "min" | "max" | null;

export interface WorkspaceMetricInfo {
  name: string;
  direction: Direction;
  primary: boolean;
}

export interface WorkspaceReply {
  runs: WorkspaceRun[];
  /** Primary first. */
  metrics: WorkspaceMetricInfo[];
  config_keys: { key: string; types: string[] }[];
  primary_metric: string | null;
  truncated: boolean;
}

export interface WorkspaceQuery {
  projects?: string[];
  experiments?: string[];
  sweep?: string | null;
  runs?: string[];
  limit?: number;
}

export interface SavedView {
  id: string;
  state: string;
  name: string | null;
  page: string;
  created_at: number;
}
