// Wire types of the control API (gpuplaned/http/openapi.py). Timestamps are ms since the epoch.

export const JOB_STATES = ["CREATED", "QUEUED", "DISPATCHING", "RUNNING", "SUCCEEDED", "FAILED", "CANCELLED", "LOST"] as const;
export type JobState = (typeof JOB_STATES)[number];
export const JOB_TYPES = ["TRAIN", "EVALUATE", "INFERENCE", "EXPORT", "CUSTOM"] as const;
export type JobType = (typeof JOB_TYPES)[number];
export const RUN_STATES = ["RUNNING", "SUCCEEDED", "FAILED", "CANCELLED", "LOST"] as const;
export type RunState = (typeof RUN_STATES)[number];
export const SEVERITIES = ["info", "warning", "critical"] as const;
export type Severity = (typeof SEVERITIES)[number];
export const STREAMS = ["stdout", "stderr"] as const;
export type LogStream = (typeof STREAMS)[number];

export interface ErrorBody {
  error: { code: string; message: string; details?: Record<string, unknown> };
}

export interface Job {
  id: string;
  name: string;
  type: JobType;
  status: JobState;
  priority: number;
  command: string[];
  cwd: string | null;
  // Values only with write access on one job; null where hidden (lists, read-only callers,
  // and names that look secret: *TOKEN*, *KEY*, *SECRET*, *PASSWORD*).
  env: Record<string, string | null>;
  gpu: number;
  labels: string[];
  node: string | null;
  node_id: string | null;
  attempt: number;
  max_attempts: number;
  timeout_s: number | null;
  stop_grace_s: number;
  run_id: string | null;
  gpu_indexes: number[];
  created_at: number;
  started_at: number | null;
  finished_at: number | null;
  exit_code: number | null;
  failure_reason: string | null;
  failure_message: string | null;  // what went wrong, in words (FAILED jobs)
  cancel_requested: boolean;
}

/** POST /api/v1/jobs (JobSubmit). */
export interface JobSubmit {
  command: string[];
  cwd: string;
  name?: string;
  type?: JobType;
  gpu?: number;
  env?: Record<string, string>;
  labels?: string[];
  node?: string;
  priority?: number;
  max_attempts?: number;
  retry?: number;
  timeout_s?: number | null;
  stop_grace_s?: number;
}

export interface Ref {
  id: string;
  name: string;
}

/** The run's primary metric (experiment -> project -> global) and its values in this run. */
export interface RunPrimaryMetric {
  name: string;
  source: string;
  direction: "minimize" | "maximize" | null;
  count: number;
  latest: MetricPointRef | null;
  best: MetricPointRef | null;
}

/** GET /runs/{id}: the run, and what it belongs to. */
export interface RunReply {
  run: Run;
  project?: Ref | null;
  experiment?: Ref | null;
  primary_metric?: RunPrimaryMetric | null;
  metric_sources?: string[] | null;
}

export interface Run {
  id: string;
  job_id: string | null;
  attempt: number | null;
  node_id: string | null;
  name: string | null;
  source: "job" | "sdk" | "import";
  status: RunState;
  created_at: number;
  started_at: number | null;
  finished_at: number | null;
  exit_code: number | null;
  failure_reason: string | null;
  env_snapshot: Record<string, unknown> | null;
  // The names of its project and experiment, what the script passed to init(config=...)
  // and its tags (in GET /runs rows and GET /runs/{id}; optional for older daemons).
  project?: string | null;
  experiment?: string | null;
  config?: Record<string, unknown> | null;
  tags?: string[];
  // GET /runs/{id} only (folded in by runFromReply).
  primary_metric?: RunPrimaryMetric | null;
  experiment_id?: string | null;
  /** Where its points came from: "sdk", "tensorboard" or both (absent from older daemons). */
  metric_sources?: string[] | null;
}

export interface MetricPointRef {
  step: number | null;
  ts?: number;
  value: number | null;
}

export interface MetricSummary {
  count: number;
  direction: "minimize" | "maximize" | null;
  latest?: MetricPointRef;
  best?: MetricPointRef;
  trend?: "increasing" | "decreasing" | "stable" | string;
}

export interface RunSummary {
  run_id: string;
  metrics: Record<string, MetricSummary>;
  progress: { step: number | null; max_steps?: number | null };
  warnings: string[];
  primary_metric?: RunPrimaryMetric | null;
}

export interface SeriesColumns {
  min: (number | null)[];
  max: (number | null)[];
  avg: (number | null)[];
  last: (number | null)[];
  count: (number | null)[];
  nan: (number | null)[];
}

export interface RunMetrics {
  run_id: string;
  x_axis: "step" | "ts";
  resolution: string;
  width: number;
  x: number[];
  series: Record<string, SeriesColumns>;
}

export interface NodeMetrics {
  node_id: string;
  start: number;
  end: number;
  resolution: "raw" | "1m" | "5m";
  width: number;
  x: number[];
  series: Record<string, SeriesColumns>;
}

export interface SlotInfo {
  index: number;
  model: string | null;
  memory_mb: number | null;
  owner_job_id: string | null;
  owner_job_name: string | null;
}

export interface GpuReading {
  index: number;
  uuid: string | null;
  model: string;
  utilization_pct: number | null;
  memory_used_mb: number | null;
  memory_total_mb: number | null;
  temperature_c: number | null;
  power_w: number | null;
  power_limit_w: number | null;
  sm_clock_mhz: number | null;
  fan_pct: number | null;
  throttle_reasons: string[];
  ecc_errors: { corrected: number | null; uncorrected: number | null } | null;
  processes: { pid: number; gpu_memory_mb: number | null; job_id: string | null; foreign: boolean }[];
  error: string | null;
  owner_job_id: string | null;
}

export interface DiskSample {
  label: string;
  path: string;
  used_bytes: number | null;
  free_bytes: number | null;
  total_bytes: number | null;
}

export interface HostSample {
  cpu_percent: number | null;
  load1: number | null;
  load5: number | null;
  load15: number | null;
  memory_used_mb: number | null;
  memory_total_mb: number | null;
  swap_used_mb: number | null;
  swap_total_mb: number | null;
  disks: DiskSample[];
  net_rx_bytes: number | null;
  net_tx_bytes: number | null;
}

export interface NodeSnapshot {
  ts: number;
  backend: string;
  gpus: GpuReading[];
  host: HostSample | null;
  jobs: { job_id: string; gpu_indexes: number[]; gpu_memory_mb: number }[];
  blocked_gpus: number[];
}

export interface NodeInfo {
  id: string;
  name: string;
  status: "ONLINE" | "OFFLINE" | "UNHEALTHY";
  connected: boolean;
  labels: string[];
  gpu_backend: string;
  gpu_backend_note: string | null;
  max_cpu_jobs: number;
  cpu_jobs: number;
  gpus: SlotInfo[];
  last_heartbeat_at: number | null;
  hardware: Record<string, unknown>;
  accepting: boolean;
  conditions: string[];
  snapshot: NodeSnapshot | null;
  drained?: boolean;
  // A remote agent's node (--role agent); false: the server's own.
  remote?: boolean;
  // The remote node's link as the server saw it since it started; null for the server's own
  // node, and for a remote node not heard from since the server started.
  link?: NodeLink | null;
}

export interface NodeLink {
  state: "attached" | "detached";
  last_heard_at: number | null;
  last_heartbeat_at: number | null;
  backlog_records: number | null;  // the agent's spool not yet acknowledged, at its last heartbeat
  backlog_bytes: number | null;
  skew_ms: number | null;  // the agent's clock minus the server's
}

export interface GpuEvent {
  id: string;
  ts: number;
  type: string;
  severity: Severity;
  node_id: string | null;
  job_id: string | null;
  run_id: string | null;
  step: number | null;
  message: string | null;
  context: Record<string, unknown>;
}

export interface LogLine {
  offset: number;
  line: string;
}

export interface LogPage {
  job_id: string;
  attempt: number;
  stream: LogStream;
  lines: LogLine[];
  next_offset: number | null;
}

export interface Checkpoint {
  id: string;
  run_id: string;
  step: number | null;
  epoch?: number | null;
  path: string;
  size_bytes: number | null;
  created_at: number;
  metadata?: Record<string, unknown> | null;
  /** With a ranking metric: its last value at or before the step, and whether this is the best. */
  metric_value?: number | null;
  best?: boolean;
  /** sha1 of size, mtime and the first and last MiB (checkpoints the node's watcher or import-run found). */
  fingerprint?: string | null;
  full_hash?: string | null;
  verified_at?: number | null;
  /** The checkpoint it was trained from: the run's previous one, or for a resumed run's first one its resume point. */
  parent_id?: string | null;
  /** The metric values nearest its step, primary first: a list of {name, value, step}, or name -> value. */
  metrics?: CheckpointMetric[] | Record<string, number | string | null> | null;
  evaluations?: Evaluation[] | null;
  /** Set once retention deleted its file. */
  deleted_at?: number | null;
}

export interface CheckpointMetric {
  name: string;
  value: number | string | null;
  step?: number | null;
}

/** A row of the `evaluations` table: one evaluation of a checkpoint. */
export interface Evaluation {
  id: string;
  checkpoint_id: string;
  job_id?: string | null;
  run_id?: string | null;
  suite?: string | null;
  dataset?: string | null;
  dataset_version?: string | null;
  metrics?: Record<string, number | string | null> | null;
  status: string;
  runtime_s?: number | null;
  created_at: number;
  started_at?: number | null;
  finished_at?: number | null;
  name?: string | null;
  error?: string | null; // why it failed, in words
  // The checkpoint it evaluates: the run that saved it, its step and path.
  checkpoint_run_id?: string | null;
  checkpoint_step?: number | null;
  checkpoint_path?: string | null;
}

export interface Project {
  id: string;
  name: string;
  experiments?: number;
  runs?: number;
}

export interface Experiment {
  id: string;
  project_id: string;
  project: string;
  name: string;
  runs?: number;
  primary_metric?: string | null;
}

/** GET|PUT /primary-metric: the metric resolved experiment -> project -> global, and each level's own setting. */
export interface PrimaryMetric {
  metric: string | null;
  source: "experiment" | "project" | "global" | null;
  project: Ref | null;
  experiment: Ref | null;
  settings: { experiment: string | null; project: string | null; global: string | null };
}

export interface CheckpointList {
  checkpoints: Checkpoint[];
  metric: string | null;
  direction: string | null;
  best_id: string | null;
}

export interface AuthSession {
  expires_at: number | null;
  scopes: string[];
  via: string;
}

export interface Page<T> {
  items: T[];
  next_cursor: string | null;
}

export interface DiagnosisFinding {
  kind: string;
  severity: Severity;
  claim: string;
  evidence: (Record<string, unknown> & { kind: string })[];
  facts: Record<string, unknown>;
}

export interface RunDiagnosis {
  run_id: string;
  summary: string;
  findings: DiagnosisFinding[];
  next_actions: string[];
}

export const WEBHOOK_FORMATS = ["json", "ntfy", "bark", "slack"] as const;
export type WebhookFormat = (typeof WEBHOOK_FORMATS)[number];

export interface WebhookCreate {
  url: string;
  events: string[];
  severity: Severity;
  format: WebhookFormat;
  secret?: string;
}

export interface Webhook {
  id: string;
  url: string;
  events: string[];
  severity: Severity;
  format: WebhookFormat;
  signed: boolean;
  created_at: number;
  pending: number;
  delivered: number;
  gave_up: number;
  last_delivered_at: number | null;
  last_error: string | null;
}

export interface WebhookTestResult {
  delivered: boolean;
  status: number | null;
  error: string | null;
}
