// One run: a headline from its summary, then tabs: metrics (uPlot panels, smoothing,
// crosshair readout, drag-zoom with finer points from the server, step or time on x), the
// node's system metrics over the run's window, its events, its checkpoints, and details
// (every metric's summary, config and environment). View state is in the URL.

import { useEffect, useMemo, useState } from "react";
import { api } from "../api/client";
import { useEventStream, useNow, useResource } from "../api/hooks";
import type { StreamState } from "../api/sse";
import type { GpuEvent, Job, NodeInfo, Run, RunSummary } from "../api/types";
import { colorOf } from "../charts/colors";
import { useMetricsLoader } from "../charts/loader";
import { GridToolbar, MetricsGrid } from "../charts/MetricsGrid";
import type { Mark } from "../charts/MetricPanel";
import { SeriesStore } from "../charts/series";
import { SystemCharts } from "../charts/SystemCharts";
import { Icon } from "../components/Icon";
import { PrimaryLevels, PrimaryStar } from "../components/PrimaryStar";
import { Ago, CopyId, Empty, ErrorBanner, KeyValues, LiveDot, Loading, PageHeader, SeverityBadge, StatusBadge, Tabs } from "../components/ui";
import { fmtDateTime, fmtDuration, fmtInt, fmtTime, fmtValue } from "../lib/format";
import { metricSourceLabel } from "../lib/checkpoints";
import { primaryLevels, primaryMetric, primaryScope } from "../lib/primary";
import { flatConfig, runLabel } from "../lib/runs";
import { throttle } from "../lib/throttle";
import { Link, useUrlState } from "../router/router";
import { CheckpointsTab } from "./RunCheckpoints";
import { DiagnosisTab } from "./RunDiagnosis";
import { bool, num, oneOf, range, str } from "../router/urlState";

const TABS = ["metrics", "diagnosis", "system", "events", "checkpoints", "details"] as const;
const schema = {
  tab: oneOf(TABS, "metrics"), x: oneOf(["step", "ts"] as const, "step"), smooth: num(0.6, 0, 0.99), m: str(),
  xr: range(), logy: bool(false),
};
const SEVERITY_COLOR: Record<string, string> = { critical: "#e15759", warning: "#d4a516", info: "#8a8f98" };

export function RunDetail({ id }: { id: string }) {
  const [view, setView] = useUrlState(schema);
  const now = useNow(1000);
  const store = useMemo(() => new SeriesStore(), [id]);
  useEffect(() => () => store.dispose(), [store]);
  const run = useResource((s) => api.getRun(id, s), [id], { live: ["runs"], pollMs: 5000, keepPrevious: false });
  const r = run.data;
  const isLive = !r || r.status === "RUNNING";
  // The headline's summary follows the run's metric stream (refreshed when points are
  // announced, at most every 2 s); it is polled only while that stream is down, or closed
  // (a zoomed chart follows no stream).
  const [metricStream, setMetricStream] = useState<StreamState | null>(null);
  const streamDown = metricStream === "reconnecting" || metricStream === "failed" || metricStream === "closed";
  const summary = useResource((s) => api.runSummary(id, s), [id],
    { pollMs: r?.status === "RUNNING" && streamDown ? 5000 : undefined });
  const summaryRefresh = useMemo(() => throttle(() => summary.reload(), 2000), [summary.reload]);
  useEffect(() => () => summaryRefresh.cancel(), [summaryRefresh]);
  // The metrics request starts with the page (prefetched before the page's code even loads);
  // what is not needed to draw the charts waits for them, so it does not compete.
  const loader = useMetricsLoader({ store, runs: [id], x: view.x, zoom: view.xr, live: isLive ? [id] : [],
    onPoints: () => summaryRefresh.call(), onStreamState: (_, state) => setMetricStream(state) });
  const chartsFirst = view.tab !== "metrics" || loader.fetchMs !== null || loader.error !== undefined;
  const job = useResource(r?.job_id ? (s) => api.getJob(r.job_id!, s) : null, [r?.job_id]);
  const nodes = useResource(chartsFirst ? (s) => api.listNodes(s) : null, [chartsFirst]);
  const events = useResource(chartsFirst ? (s) => api.listEvents({ run_id: id, limit: 500 }, s) : null, [id, chartsFirst]);
  const [liveEvents, setLiveEvents] = useState<GpuEvent[]>([]);
  const [eventPushes, setEventPushes] = useState(0); // what the diagnosis is refreshed on
  const eventStream = useEventStream(r?.status === "RUNNING" && events.data ? `run-events/${id}` : null,
    { path: "/events/stream", query: { run_id: id }, lastEventId: events.data?.events[0]?.id ?? null },
    (m) => {
      if (m.event === "event" || m.event === "lagged") setEventPushes((n) => n + 1);
      if (m.event !== "event") return;
      const ev = JSON.parse(m.data) as GpuEvent;
      setLiveEvents((l) => (l.some((e) => e.id === ev.id) ? l : [ev, ...l]));
    });
  const allEvents = useMemo(() => {
    const seen = new Set<string>();
    return [...liveEvents, ...(events.data?.events ?? [])].filter((e) => (seen.has(e.id) ? false : (seen.add(e.id), true)));
  }, [liveEvents, events.data]);

  const panelRuns = useMemo(() => [{ id, label: r ? runLabel(r) : id, color: colorOf(id) }], [id, r?.name]); // eslint-disable-line react-hooks/exhaustive-deps
  const marks = useMemo(() => {
    const out: Mark[] = [];
    for (const e of allEvents) {
      if (e.severity === "info" && !e.type.startsWith("CHECKPOINT")) continue;
      const x = view.x === "step" ? e.step : e.ts;
      if (x !== null) out.push({ x, color: SEVERITY_COLOR[e.severity] ?? "#888", label: e.type, critical: e.severity === "critical" });
    }
    return out;
  }, [allEvents, view.x]);

  if (run.error && !r) {
    return (
      <div className="page">
        <PageHeader title="Run" />
        {run.error.status === 404 ? <Empty title="No such run" icon="runs">{id} is not known to this daemon. <Link to="/runs">All runs</Link></Empty>
          : <ErrorBanner error={run.error} onRetry={run.reload} />}
      </div>
    );
  }

  const node = findNode(nodes.data, r);
  return (
    <div className="page">
      <PageHeader
        title={<><span className="crumb"><Link to="/runs">Runs</Link><Icon name="chevronRight" size={14} /></span>
          <span className="run-swatch big" style={{ background: colorOf(id) }} />{r ? runLabel(r) : <span className="muted">…</span>}</>}
        sub={r && <><StatusBadge status={r.status} /> <CopyId id={r.id} />
          {r.project && <span className="muted"> · {r.project}{r.experiment ? ` / ${r.experiment}` : ""}</span>}
          {r.failure_reason && <span className="text-bad"> · {r.failure_reason}</span>}
          {metricSourceLabel(r.metric_sources) && <span className="badge badge-info metric-source" title="Where this run's metrics came from">
            metrics: {metricSourceLabel(r.metric_sources)}</span>}</>}>
        {r?.job_id && <Link className="btn" to={`/jobs/${r.job_id}`}><Icon name="jobs" size={14} />Job &amp; logs</Link>}
        {r?.experiment_id && <Link className="btn" to={`/evaluations?experiment=${encodeURIComponent(r.experiment_id)}`}>
          <Icon name="evals" size={14} />Evaluations</Link>}
        <Link className="btn" to={`/compare?runs=${id}`}><Icon name="compare" size={14} />Compare</Link>
      </PageHeader>
      <Headline run={r} summary={summary.data} node={node} now={now} />
      <div className="toolbar tabs-bar">
        <Tabs value={view.tab} onChange={(tab) => setView({ tab }, { push: true })} items={[
          { id: "metrics", label: "Metrics" }, { id: "diagnosis", label: "Diagnosis" }, { id: "system", label: "System" },
          { id: "events", label: "Events", count: allEvents.length || undefined },
          { id: "checkpoints", label: "Checkpoints" }, { id: "details", label: "Details" },
        ]} />
      </div>
      {view.tab === "metrics" && (
        <>
          <GridToolbar view={view} setView={setView} names={store.names().length} width={loader.width}
            extra={isLive && r ? <LiveDot state={view.xr ? "paused" : "open"} title={view.xr ? "Zoomed: new points are not followed" : "New points as they are committed"} /> : undefined} />
          <MetricsGrid store={store} runs={panelRuns} view={view} setView={setView} syncKey={`run-${id}`}
            loading={loader.loading} error={loader.error} marks={marks}
            panelExtra={r ? (name) => <PrimaryStar name={name} run={r} primary={summary.data?.primary_metric}
              onChanged={() => { summary.reload(); run.reload(); }} /> : undefined}
            emptyHint={<>This run has logged no metrics. From the training script: <code>run.log({"{"}"train/loss": loss{"}"}, step=step)</code></>} />
        </>
      )}
      {view.tab === "diagnosis" && <DiagnosisTab runId={id} live={isLive}
        events={{ state: eventStream.state, pushes: eventPushes }} />}
      {view.tab === "system" && r && <SystemTab run={r} job={job.data} node={node} />}
      {view.tab === "events" && <EventsTab events={allEvents} loading={!events.data} error={events.error} now={now}
        live={r?.status === "RUNNING" ? eventStream.state : null} />}
      {view.tab === "checkpoints" && <CheckpointsTab runId={id} summary={summary.data} />}
      {view.tab === "details" && <DetailsTab run={r} summary={summary.data} job={job.data}
        onPrimaryChanged={() => { summary.reload(); run.reload(); }} />}
    </div>
  );
}

function findNode(nodes: NodeInfo[] | undefined, run: Run | undefined): NodeInfo | undefined {
  if (!nodes || !run || run.source === "import") return undefined; // no node of ours ran an imported run
  if (run.node_id) return nodes.find((n) => n.id === run.node_id);
  const host = run.env_snapshot?.host;
  if (typeof host === "string") return nodes.find((n) => n.name === host || n.hardware.hostname === host);
  return nodes.length === 1 ? nodes[0] : undefined;
}

function Headline({ run, summary, node, now }: { run: Run | undefined; summary: RunSummary | undefined; node: NodeInfo | undefined;
  now: number }) {
  const primary = primaryMetric(summary);
  const names = summary ? Object.keys(summary.metrics).sort() : [];
  const featured = [
    ...(primary ? [primary.name] : []),
    ...names.filter((n) => n !== primary?.name && summary!.metrics[n].direction),
  ].slice(0, 4);
  const started = run?.started_at ?? run?.created_at;
  return (
    <div className="headline">
      <div className="stat"><span>Step</span><b className="mono">{fmtInt(summary?.progress.step ?? null)}</b></div>
      <div className="stat"><span>Duration</span><b>{started ? fmtDuration((run?.finished_at ?? now) - started) : "—"}</b></div>
      <div className="stat"><span>Started</span><b>{fmtTime(started)}</b></div>
      <div className="stat"><span>Node</span><b>{node ? <Link to={`/nodes?node=${encodeURIComponent(node.name)}`}>{node.name}</Link> : "—"}</b></div>
      {featured.map((name) => {
        const m = summary!.metrics[name];
        return (
          <div key={name} className="stat metric-stat" title={m.best ? `best ${fmtValue(m.best.value)} at step ${fmtInt(m.best.step)}` : undefined}>
            <span className="mono">{name}{name === primary?.name && <i className="primary-star" title={primary.chosen ? `Primary metric (set on the ${summary?.primary_metric?.source ?? "project"})` : "Ranking metric: no primary metric is set, so an eval metric or a loss is used"}>{primary.chosen ? "★" : "☆"}</i>}</span>
            <b className="mono">{fmtValue(m.latest?.value)}
              {m.trend && <span className={`trend trend-${m.trend}`}>{m.trend === "decreasing" ? "↘" : m.trend === "increasing" ? "↗" : "→"}</span>}</b>
            {m.best && <small className="muted mono">best {fmtValue(m.best.value)} @ {fmtInt(m.best.step)}</small>}
          </div>
        );
      })}
      {summary && summary.warnings.length > 0 && (
        <div className="stat warn-stat"><span>Warnings</span>{summary.warnings.map((w) => <b key={w} className="text-warn small">{w}</b>)}</div>
      )}
    </div>
  );
}

function SystemTab({ run, job, node }: { run: Run; job: Job | undefined; node: NodeInfo | undefined }) {
  if (!node) {
    return <Empty title="The run's node is not known" icon="nodes">
      {run.source === "import" ? "This run was imported from a finished run's files; no node of this daemon ran it."
        : run.source === "sdk" ? "This run was started outside a job, and its host does not match a node's name." : "The node that ran it has left."}
    </Empty>;
  }
  const start = run.started_at ?? run.created_at;
  const end = run.status === "RUNNING" ? null : run.finished_at ?? start + 60_000;
  let gpus: number[] | null = null;
  if (job?.gpu_indexes.length) gpus = job.gpu_indexes;
  else {
    const env = run.env_snapshot?.env as Record<string, string> | undefined;
    const cvd = env?.CUDA_VISIBLE_DEVICES;
    if (cvd && /^\d+(,\d+)*$/.test(cvd)) gpus = cvd.split(",").map(Number);
  }
  return (
    <>
      <p className="muted small tab-note">
        {node.name}, {fmtDateTime(start)} – {end ? fmtDateTime(end) : "now"}
        {gpus ? ` · GPU ${gpus.join(", ")}` : " · all GPUs"}
      </p>
      <SystemCharts nodeId={node.id} span={{ start, end }} gpus={gpus} syncKey={`sys-${run.id}`} />
    </>
  );
}

function EventsTab({ events, loading, error, now, live }: { events: GpuEvent[]; loading: boolean; error: Error | undefined; now: number;
  live: import("../api/sse").StreamState | null }) {
  if (error) return <ErrorBanner error={error} />;
  if (loading) return <Loading rows={5} />;
  return (
    <div className="card">
      <header className="card-head"><h2>Timeline</h2>{live && <LiveDot state={live} />}</header>
      {events.length === 0 ? <Empty compact title="No events for this run" icon="events">
        Lifecycle changes, loss spikes, NaN losses and GPU trouble show up here.</Empty> : (
        <ol className="timeline">
          {events.map((e) => (
            <li key={e.id} className={`tl-${e.severity}`}>
              <span className="tl-time mono small" title={new Date(e.ts).toLocaleString()}>{fmtTime(e.ts)}</span>
              <span className="tl-dot" />
              <div className="tl-body">
                <div><SeverityBadge severity={e.severity} /> <b className="mono small">{e.type}</b>
                  {e.step !== null && <span className="muted small mono"> · step {fmtInt(e.step)}</span>}
                  <span className="muted small"> · <Ago ts={e.ts} now={now} /></span></div>
                {(e.message || Object.keys(e.context ?? {}).length > 0) && (
                  <div className="small">{e.message}
                    {Object.keys(e.context ?? {}).length > 0 && <details className="inline"><summary className="muted small">context</summary>
                      <pre className="ctx small">{JSON.stringify(e.context, null, 2)}</pre></details>}
                  </div>
                )}
              </div>
            </li>
          ))}
        </ol>
      )}
    </div>
  );
}

function DetailsTab({ run, summary, job, onPrimaryChanged }: { run: Run | undefined; summary: RunSummary | undefined;
  job: Job | undefined; onPrimaryChanged: () => void }) {
  const levels = run ? primaryLevels(run) : [];
  const scope = run ? primaryScope(run).body : {};
  const primary = useResource(run ? (s) => api.getPrimaryMetric(scope, s) : null, [run?.experiment_id, run?.project]);
  if (!run) return <Loading rows={6} />;
  const env = run.env_snapshot ?? {};
  const config = flatConfig(run.config);
  const packages = (env.packages ?? {}) as Record<string, string>;
  const metrics = summary ? Object.entries(summary.metrics).sort(([a], [b]) => a.localeCompare(b)) : [];
  return (
    <div className="details-grid">
      <section className="card span-all">
        <header className="card-head"><h2>Metrics summary</h2></header>
        {metrics.length === 0 ? <Empty compact title="No metrics logged" icon="runs" /> : (
          <div className="table-scroll" tabIndex={0} role="region" aria-label="Metrics summary"><table className="table compact">
            <thead><tr><th>Metric</th><th className="num">Latest</th><th className="num">Best</th><th className="num">at step</th>
              <th>Goal</th><th>Trend</th><th className="num">Points</th><th>Primary metric of</th></tr></thead>
            <tbody>
              {metrics.map(([name, m]) => (
                <tr key={name}>
                  <td className="mono">{name}</td>
                  <td className="num mono">{fmtValue(m.latest?.value)}</td>
                  <td className="num mono">{m.best ? fmtValue(m.best.value) : ""}</td>
                  <td className="num mono">{m.best ? fmtInt(m.best.step) : ""}</td>
                  <td className="muted">{m.direction === "minimize" ? "min" : m.direction === "maximize" ? "max" : ""}</td>
                  <td>{m.trend ?? ""}</td>
                  <td className="num">{fmtInt(m.count)}</td>
                  <td data-primary-levels={name}><PrimaryLevels name={name} levels={levels} settings={primary.data?.settings}
                    onChanged={() => { primary.reload(); onPrimaryChanged(); }} /></td>
                </tr>
              ))}
            </tbody>
          </table></div>
        )}
      </section>
      <section className="card">
        <header className="card-head"><h2>Run</h2></header>
        <KeyValues items={[
          ["Id", <CopyId id={run.id} full />],
          ["Source", run.source === "job" ? <>job <Link to={`/jobs/${run.job_id}`}>{job?.name ?? run.job_id}</Link>, attempt {run.attempt}</>
            : run.source === "import" ? <>imported (<code>gpuplanectl run import</code>)</> : "SDK (started outside a job)"],
          ["Metrics from", metricSourceLabel(run.metric_sources) ?? "—"],
          ["Created", fmtDateTime(run.created_at)],
          ["Finished", fmtDateTime(run.finished_at)],
          ["Exit code", run.exit_code === null ? "—" : String(run.exit_code)],
          ...(run.tags?.length ? [["Tags", run.tags.join(", ")] as [string, string]] : []),
        ]} />
        {Object.keys(config).length > 0 && (
          <>
            <h3 className="sub-title">Config</h3>
            <KeyValues items={Object.entries(config).map(([k, v]) => [k, <span className="mono">{typeof v === "string" ? v : JSON.stringify(v)}</span>])} />
          </>
        )}
      </section>
      <section className="card">
        <header className="card-head"><h2>Environment</h2></header>
        {Object.keys(env).length === 0 ? <Empty compact title="No environment recorded" icon="runs">The SDK records it when the script calls gpuplane.init().</Empty> : (
          <KeyValues items={[
            ["Host", String(env.host ?? "—")],
            ["Python", String(env.python ?? "—")],
            ["Command", <span className="mono">{Array.isArray(env.argv) ? (env.argv as string[]).join(" ") : "—"}</span>],
            ["Directory", <span className="mono">{String(env.cwd ?? "—")}</span>],
            ...(env.git_commit ? [["Git", <span className="mono">{String(env.git_commit).slice(0, 12)}{env.git_dirty ? " (dirty)" : ""}</span>] as [string, React.ReactNode]] : []),
            ...(Object.keys(packages).length ? [["Packages", <span className="mono">{Object.entries(packages).map(([k, v]) => `${k} ${v}`).join(", ")}</span>] as [string, React.ReactNode]] : []),
            ["Platform", <span className="small">{String(env.platform ?? "—")}</span>],
          ]} />
        )}
      </section>
    </div>
  );
}
