// The typed HTTP client. Same origin as the UI: the session cookie (HttpOnly, set by the
// daemon) rides along with `credentials: "same-origin"`; every non-GET request carries the
// CSRF header. No token is ever kept in the page, a URL or localStorage.

import type {
  ApiToken,
  AuthSession,
  CheckpointList,
  ErrorBody,
  Evaluation,
  Experiment,
  Group,
  GroupList,
  Job,
  JobSubmit,
  LogPage,
  LogStream,
  NodeInfo,
  NodeMetrics,
  PrimaryMetric,
  Project,
  Run,
  RunMetrics,
  RunReply,
  RunSummary,
  RunDiagnosis,
  Sweep,
  SweepDetail,
  SweepVerb,
  Webhook,
  WebhookCreate,
  WebhookTestResult,
} from "./types";
import type { components } from "./openapi";

/** The document's own names for the replies' envelopes ({jobs, next_cursor}, {job}, ...). */
type Schemas = components["schemas"];

export const API = "/api/v1";
export const CSRF_HEADER = "X-GPUPlane-CSRF";

export class ApiError extends Error {
  readonly status: number;
  readonly code: string;
  readonly details: Record<string, unknown>;

  constructor(status: number, code: string, message: string, details: Record<string, unknown> = {}) {
    super(message);
    this.name = "ApiError";
    this.status = status;
    this.code = code;
    this.details = details;
  }

  /** A 404 for the route itself (the daemon lacks this endpoint), not for an object. */
  get missingEndpoint(): boolean {
    return this.status === 404 && /^no such endpoint/.test(this.message);
  }
}

type QueryValue = string | number | boolean | null | undefined | readonly (string | number)[];

export function buildQuery(query: Record<string, QueryValue> = {}): string {
  const params = new URLSearchParams();
  for (const [key, value] of Object.entries(query)) {
    if (value === undefined || value === null || value === "") continue;
    if (Array.isArray(value)) {
      if (value.length) params.set(key, value.join(","));
    } else {
      params.set(key, String(value));
    }
  }
  const text = params.toString();
  return text ? `?${text}` : "";
}

/** Where the sign-in page sends the user back to: only a path on this origin. */
export function safeNext(next: string | null | undefined): string {
  if (!next || !next.startsWith("/") || next.startsWith("//") || next.startsWith("/\\")) return "/";
  if (next.startsWith("/signin")) return "/";
  return next;
}

export function signinUrl(current: string): string {
  const next = safeNext(current);
  return next === "/" ? "/signin" : `/signin?next=${encodeURIComponent(next)}`;
}

let unauthorized: () => void = () => {
  const here = window.location.pathname + window.location.search + window.location.hash;
  if (window.location.pathname === "/signin") return;
  window.history.pushState(null, "", signinUrl(here));
  window.dispatchEvent(new PopStateEvent("popstate"));
};

/** Replaces what a 401 does (tests; the app keeps the default: go to /signin?next=...). */
export function onUnauthorized(handler: () => void): void {
  unauthorized = handler;
}

export function notifyUnauthorized(): void {
  unauthorized();
}

export async function errorFrom(response: Response): Promise<ApiError> {
  let body: Partial<ErrorBody> | null = null;
  try {
    body = (await response.json()) as Partial<ErrorBody>;
  } catch {
    body = null;
  }
  const error = body?.error;
  if (error && typeof error.message === "string") {
    return new ApiError(response.status, error.code ?? "error", error.message, error.details ?? {});
  }
  return new ApiError(response.status, "http_error", `${response.status} ${response.statusText || "error"}`);
}

export function idempotencyKey(): string {
  const bytes = new Uint8Array(16);
  crypto.getRandomValues(bytes);
  return Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
}

export interface RequestOptions {
  method?: "GET" | "POST" | "PUT" | "PATCH" | "DELETE";
  query?: Record<string, QueryValue>;
  body?: unknown;
  signal?: AbortSignal;
  idempotencyKey?: string;
  /** Do not leave for the sign-in page on a 401 (the sign-in call itself). */
  quiet401?: boolean;
}

export async function request<T>(path: string, options: RequestOptions = {}): Promise<T> {
  const method = options.method ?? "GET";
  const headers: Record<string, string> = { Accept: "application/json" };
  if (method !== "GET") headers[CSRF_HEADER] = "1";
  if (options.body !== undefined) headers["Content-Type"] = "application/json";
  if (options.idempotencyKey) headers["Idempotency-Key"] = options.idempotencyKey;
  let response: Response;
  try {
    response = await fetch(API + path + buildQuery(options.query), {
      method,
      headers,
      body: options.body === undefined ? undefined : JSON.stringify(options.body),
      credentials: "same-origin",
      signal: options.signal,
    });
  } catch (error) {
    if ((error as Error).name === "AbortError") throw error;
    throw new ApiError(0, "network", "The daemon is not reachable.");
  }
  if (!response.ok) {
    const error = await errorFrom(response);
    if (response.status === 401 && !options.quiet401) notifyUnauthorized();
    throw error;
  }
  if (response.status === 204) return undefined as T;
  return (await response.json()) as T;
}

/** A run with the names of its project and experiment folded in. */
export function runFromReply(reply: RunReply): Run {
  return {
    ...reply.run,
    project: reply.project?.name ?? reply.run.project ?? null,
    experiment: reply.experiment?.name ?? reply.run.experiment ?? null,
    primary_metric: reply.primary_metric ?? null,
    experiment_id: reply.experiment?.id ?? null,
  };
}

// --- endpoints -----------------------------------------------------------------------------

export const api = {
  session: (signal?: AbortSignal) =>
    request<Schemas["UiSessionReply"]>("/auth/session", { signal, quiet401: true }).then((r): AuthSession => r.session),
  login: (token: string) =>
    request<Schemas["UiSessionReply"]>("/auth/login", { method: "POST", body: { token }, quiet401: true }),
  logout: () => request<Schemas["LogoutReply"]>("/auth/logout", { method: "POST", quiet401: true }),

  listJobs: (query: { status?: readonly string[]; group?: string; limit?: number; cursor?: string | null }, signal?: AbortSignal) =>
    request<Schemas["JobList"]>("/jobs", { query, signal }),
  getJob: (id: string, signal?: AbortSignal) =>
    request<Schemas["JobReply"]>(`/jobs/${encodeURIComponent(id)}`, { signal }).then((r): Job => r.job),
  submitJob: (body: JobSubmit, key: string) =>
    request<Schemas["JobReply"]>("/jobs", { method: "POST", body, idempotencyKey: key }).then((r): Job => r.job),
  cancelJob: (id: string) =>
    request<Schemas["JobReply"]>(`/jobs/${encodeURIComponent(id)}/cancel`, { method: "POST" }).then((r): Job => r.job),
  retryJob: (id: string) =>
    request<Schemas["JobReply"]>(`/jobs/${encodeURIComponent(id)}/retry`, { method: "POST" }).then((r): Job => r.job),
  setJobPriority: (id: string, priority: number) =>
    request<Schemas["JobReply"]>(`/jobs/${encodeURIComponent(id)}/priority`, { method: "POST", body: { priority } })
      .then((r): Job => r.job),
  listGroups: (signal?: AbortSignal) => request<GroupList>("/groups", { signal }),
  pauseGroup: (name: string, verb: "pause" | "resume") =>
    request<Schemas["GroupReply"]>(`/groups/${encodeURIComponent(name)}/${verb}`, { method: "POST" }).then((r): Group => r.group),

  listSweeps: (signal?: AbortSignal) => request<Schemas["SweepList"]>("/sweeps", { signal }).then((r): Sweep[] => r.sweeps),
  getSweep: (id: string, signal?: AbortSignal) =>
    request<Schemas["SweepShown"]>(`/sweeps/${encodeURIComponent(id)}`, { signal }).then((r): SweepDetail => r.sweep),
  changeSweep: (id: string, verb: SweepVerb) =>
    request<Schemas["SweepReply"]>(`/sweeps/${encodeURIComponent(id)}/${verb}`, { method: "POST" }).then((r): Sweep => r.sweep),

  jobLogs: (id: string, query: { stream: LogStream; tail?: number; attempt?: number }, signal?: AbortSignal) =>
    request<LogPage>(`/jobs/${encodeURIComponent(id)}/logs`, { query, signal }),

  listRuns: (query: { status?: readonly string[]; job_id?: string; limit?: number; cursor?: string | null },
    signal?: AbortSignal) => request<Schemas["RunList"]>("/runs", { query, signal }),
  getRun: (id: string, signal?: AbortSignal) =>
    request<RunReply>(`/runs/${encodeURIComponent(id)}`, { signal }).then(runFromReply),
  runSummary: (id: string, signal?: AbortSignal) =>
    request<{ summary: RunSummary }>(`/runs/${encodeURIComponent(id)}/summary`, { signal }).then((r) => r.summary),
  runMetrics: (id: string, query: { names?: readonly string[]; x?: "step" | "ts"; start?: number; end?: number;
    points?: number }, signal?: AbortSignal) =>
    request<RunMetrics>(`/runs/${encodeURIComponent(id)}/metrics`, { query, signal }),
  queryRunsMetrics: (body: Schemas["RunMetricsQuery"], signal?: AbortSignal) =>
    request<Schemas["RunMetricsMany"]>("/runs/metrics:query", { method: "POST", body, signal }).then((r): RunMetrics[] => r.runs),
  /** The Experiments table: runs of projects, experiments or a sweep (or listed), with flattened configs and
   * per-metric count, last, min, max and best. */
  workspaceRuns: (body: Schemas["WorkspaceQuery"], signal?: AbortSignal) =>
    request<Schemas["WorkspaceRuns"]>("/workspace/runs", { method: "POST", body, signal }),
  /** Keep a page's URL state under a short id (/v/<id>); with a name, a saved view. The same state gives the same id. */
  createView: (body: Schemas["ViewCreate"]) =>
    request<Schemas["ViewReply"]>("/views", { method: "POST", body }).then((r): Schemas["View"] => r.view),
  getView: (id: string, signal?: AbortSignal) =>
    request<Schemas["ViewReply"]>(`/views/${encodeURIComponent(id)}`, { signal }).then((r): Schemas["View"] => r.view),
  listViews: (query: { saved?: boolean; page?: string; limit?: number }, signal?: AbortSignal) =>
    request<Schemas["ViewList"]>("/views", {
      query: { saved: query.saved === undefined ? undefined : String(query.saved), page: query.page, limit: query.limit },
      signal,
    }).then((r): Schemas["View"][] => r.views),
  deleteView: (id: string) =>
    request<Schemas["ViewReply"]>(`/views/${encodeURIComponent(id)}`, { method: "DELETE" }).then((r): Schemas["View"] => r.view),
  runCheckpoints: (id: string, metric: string | null, signal?: AbortSignal) =>
    request<CheckpointList>(`/runs/${encodeURIComponent(id)}/checkpoints`, { query: { metric }, signal }),
  /** The primary metric where a run sits, resolved experiment -> project -> global, with each level's own setting. */
  getPrimaryMetric: (query: { project?: string; experiment?: string }, signal?: AbortSignal) =>
    request<Schemas["PrimaryMetricReply"]>("/primary-metric", { query, signal }).then((r): PrimaryMetric => r.primary_metric),
  /** Set (or, with null, clear) the primary metric of an experiment, a project, or globally. */
  setPrimaryMetric: (body: Schemas["PrimaryMetricPut"]) =>
    request<Schemas["PrimaryMetricReply"]>("/primary-metric", { method: "PUT", body }).then((r): PrimaryMetric => r.primary_metric),
  listProjects: (signal?: AbortSignal) =>
    request<Schemas["ProjectList"]>("/projects", { query: { limit: 200 }, signal }).then((r): Project[] => r.projects),
  listExperiments: (project: string, signal?: AbortSignal) =>
    request<Schemas["ExperimentList"]>(`/projects/${encodeURIComponent(project)}/experiments`,
      { query: { limit: 200 }, signal }).then((r): Experiment[] => r.experiments),
  getExperiment: (id: string, signal?: AbortSignal) =>
    request<Schemas["ExperimentReply"]>(`/experiments/${encodeURIComponent(id)}`, { signal }).then((r): Experiment => r.experiment),
  experimentEvaluations: (id: string, signal?: AbortSignal) =>
    request<Schemas["ExperimentEvaluations"]>(`/experiments/${encodeURIComponent(id)}/evaluations`, { signal })
      .then((r): Evaluation[] => r.evaluations),

  listNodes: (signal?: AbortSignal) => request<Schemas["NodeList"]>("/nodes", { signal }).then((r): NodeInfo[] => r.nodes),
  nodeMetrics: (key: string, query: { names?: readonly string[]; window?: string; start?: number; end?: number;
    points?: number }, signal?: AbortSignal) =>
    request<NodeMetrics>(`/nodes/${encodeURIComponent(key)}/metrics`, { query, signal }),

  listEvents: (query: { severity?: readonly string[]; type?: readonly string[]; run_id?: string; job_id?: string;
    node_id?: string; limit?: number; cursor?: string | null }, signal?: AbortSignal) =>
    request<Schemas["EventList"]>("/events", { query, signal }),
  runDiagnosis: (id: string, signal?: AbortSignal) => request<RunDiagnosis>(`/runs/${encodeURIComponent(id)}/diagnosis`, { signal }),
  // Webhooks: the admin scope (a Slack or Bark URL is a credential); the secret is never shown back.
  listTokens: (query: { limit?: number; cursor?: string | null }, signal?: AbortSignal) =>
    request<Schemas["TokenList"]>("/tokens", { query, signal }),
  revokeToken: (id: string) =>
    request<Schemas["TokenReply"]>(`/tokens/${encodeURIComponent(id)}/revoke`, { method: "POST" }).then((r): ApiToken => r.token),
  listAudit: (query: { token?: string; limit?: number; cursor?: string | null }, signal?: AbortSignal) =>
    request<Schemas["AuditList"]>("/audit", { query, signal }),

  listWebhooks: (signal?: AbortSignal) =>
    request<Schemas["WebhookList"]>("/webhooks", { signal }).then((r): Webhook[] => r.webhooks),
  createWebhook: (body: WebhookCreate) =>
    request<Schemas["WebhookReply"]>("/webhooks", { method: "POST", body }).then((r): Webhook => r.webhook),
  deleteWebhook: (id: string) => request<Schemas["WebhookDeleted"]>(`/webhooks/${encodeURIComponent(id)}`, { method: "DELETE" }),
  testWebhook: (id: string) =>
    request<Schemas["WebhookTested"]>(`/webhooks/${encodeURIComponent(id)}/test`, { method: "POST" })
      .then((r): WebhookTestResult => r.result),
};
