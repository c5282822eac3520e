// Wire types of the control API, by the names the UI uses. They come from openapi.ts, which
// `npm run gen:types` writes from the daemon's OpenAPI document (gpuplaned/http/openapi.py):
// change a shape in gpuplaned/, not here. Timestamps are ms since the epoch.
//
// The few types written out below narrow a field the document leaves an untyped object
// (`dict` on the Python side); each says which.

import {
  eventSeverityValues,
  jobStatusValues,
  jobTypeValues,
  runStatusValues,
  webhookInfoFormatValues,
  type components,
  type operations,
} from "./openapi";

type Schemas = components["schemas"];

export const JOB_STATES = jobStatusValues;
export type JobState = Schemas["Job"]["status"];
export const JOB_TYPES = jobTypeValues;
export type JobType = Schemas["Job"]["type"];
export const RUN_STATES = runStatusValues;
export type RunState = Schemas["Run"]["status"];
export const SEVERITIES = eventSeverityValues;
export type Severity = Schemas["Event"]["severity"];
/** The stream= of GET /jobs/{id}/logs. */
export type LogStream = NonNullable<NonNullable<operations["getJobLogs"]["parameters"]["query"]>["stream"]>;
export const WEBHOOK_FORMATS = webhookInfoFormatValues;
export type WebhookFormat = Schemas["WebhookInfo"]["format"];

export type ErrorBody = Schemas["Error"];

export type Job = Schemas["Job"];
/** POST /api/v1/jobs as the UI sends it: always cwd, never its alias dir; the form refuses an empty
 * command before sending, so it is a plain array here (the document: at least one word). */
export type JobSubmit = Omit<Schemas["JobSubmit"], "command" | "cwd" | "dir"> & { command: string[]; cwd: string };
export type Ref = Schemas["Ref"];

/** A point of a metric: RunPrimaryMetric's latest and best, MetricSummary's (the document: an object). */
export interface MetricPointRef {
  step: number | null;
  ts?: number;
  value: number | null;
}

/** The run's primary metric (experiment -> project -> global) and its values in this run. */
export type RunPrimaryMetric = Omit<Schemas["RunPrimaryMetric"], "latest" | "best"> & {
  latest: MetricPointRef | null;
  best: MetricPointRef | null;
};

/** GET /runs/{id}: the run, and what it belongs to. */
export type RunReply = Omit<Schemas["RunReply"], "primary_metric"> & { primary_metric: RunPrimaryMetric | null };

/** A run; from GET /runs/{id}, with its reply's primary metric and experiment folded in (runFromReply). */
export type Run = Schemas["Run"] & {
  primary_metric?: RunPrimaryMetric | null;
  experiment_id?: string | null;
};

/** One metric of a run's summary (the document: RunSummary.metrics maps a name to an object). */
export interface MetricSummary {
  count: number;
  direction: "minimize" | "maximize" | null;
  latest?: MetricPointRef;
  best?: MetricPointRef;
  trend?: "increasing" | "decreasing" | "stable" | string;
}

export type RunSummary = Omit<Schemas["RunSummary"], "metrics" | "primary_metric"> & {
  metrics: Record<string, MetricSummary>;
  primary_metric: RunPrimaryMetric | null;
};

export type SeriesColumns = Schemas["Buckets"];
export type RunMetrics = Schemas["RunMetrics"];
export type NodeMetrics = Schemas["NodeMetrics"];

export type SlotInfo = Schemas["SlotInfo"];
export type GpuReading = Schemas["GpuReading"];
export type DiskSample = Schemas["DiskSample"];
export type HostSample = Schemas["HostSample"];
export type NodeSnapshot = Schemas["NodeSnapshot"];
export type NodeInfo = Schemas["Node"];
export type NodeLink = Schemas["LinkView"];

export type GpuEvent = Schemas["Event"];

export type LogLine = Schemas["LogLine"];
export type LogPage = Schemas["LogPage"];
/** The `end` event of GET /jobs/{id}/logs/stream. */
export type LogEnd = Schemas["LogEnd"];

export type Checkpoint = Schemas["Checkpoint"];
export type CheckpointMetric = Schemas["CheckpointMetric"];
export type CheckpointList = Schemas["CheckpointList"];
export type CheckpointEvaluation = Schemas["CheckpointEvaluation"];
export type Evaluation = Schemas["Evaluation"];

export type Project = Schemas["Project"];
export type Experiment = Schemas["Experiment"];
export type PrimaryMetric = Schemas["PrimaryMetric"];

export type AuthSession = Schemas["UiSession"];

/** A finding of a diagnosis; each piece of evidence names its kind (the document: an object). */
export type DiagnosisFinding = Omit<Schemas["Finding"], "evidence"> & {
  evidence: (Record<string, unknown> & { kind: string })[];
};

export type RunDiagnosis = Omit<Schemas["RunDiagnosis"], "findings"> & { findings: DiagnosisFinding[] };

export type WebhookCreate = Schemas["WebhookCreate"];
export type Webhook = Schemas["WebhookInfo"];
export type WebhookTestResult = Schemas["WebhookTestResult"];
export type Sweep = Schemas["Sweep"];
export type SweepDetail = Schemas["SweepDetail"];
export type SweepTrial = Schemas["SweepTrial"];
export type SweepVerb = "cancel" | "pause" | "resume" | "retry-failed";
export type JobLink = Schemas["JobLink"];
export type Group = Schemas["GroupView"];
export type GroupList = Schemas["GroupList"];
export type ApiToken = Schemas["Token"];
export type TokenLimits = Schemas["TokenLimits"];
export type AuditRow = Schemas["AuditRow"];
