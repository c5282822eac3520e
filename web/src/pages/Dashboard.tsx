// Dashboard: a card per node (GPU utilization, memory, temperature and power sparklines,
// updated every 2 s), the running jobs with their run's progress, the queue, and recent
// warning and critical events as they happen.

import { useEffect, useMemo, useRef, useState } from "react";
import { api } from "../api/client";
import { useEventStream, useNow, useResource } from "../api/hooks";
import type { GpuEvent, GpuReading, Job, NodeInfo, RunSummary } from "../api/types";
import { LiveStore } from "../charts/live";
import { Sparkline } from "../charts/Sparkline";
import { Icon } from "../components/Icon";
import { Ago, Empty, ErrorBanner, LiveDot, Loading, Meter, PageHeader, SeverityBadge, StatusBadge } from "../components/ui";
import { fmtDuration, fmtInt, fmtMiB, fmtPct, fmtValue, lastSeen, pooledCapacity } from "../lib/format";
import { ACTIVE, WAITING } from "../lib/jobStates";
import { GPU_FIELDS, gpuKey, snapshotPoints } from "../lib/nodeKeys";
import { useTheme } from "../lib/theme";
import { Link, navigate } from "../router/router";
import { colorOf } from "../charts/colors";
import { runLabel } from "../lib/runs";
import { useSummaries } from "../lib/summaries";

const WINDOW_MS = 10 * 60_000;
const SPARK_COLORS: Record<string, string> = {
  utilization: "#4e79d8", memory_used_mb: "#9b6fd0", temperature_c: "#f28e2b", power_w: "#3fae5a",
};
const SHOWN = [...WAITING, ...ACTIVE]; // the queued and the running panes

export function Dashboard() {
  const now = useNow(1000);
  const store = useMemo(() => new LiveStore(WINDOW_MS), []);
  useEffect(() => () => store.dispose(), [store]);

  const nodes = useResource((s) => api.listNodes(s), [], { live: ["nodes"], pollMs: 2000, liveGapMs: 2000 });
  const jobs = useResource((s) => api.listJobs({ status: SHOWN, limit: 500 }, s), [], { live: ["jobs"], pollMs: 3000 });

  // Each fetch adds the latest readings; the first sight of a node seeds 10 minutes of history.
  const seeded = useRef(new Set<string>());
  useEffect(() => {
    for (const node of nodes.data ?? []) {
      if (node.snapshot) for (const [k, v] of snapshotPoints(node.id, node.snapshot)) store.push(k, node.snapshot.ts, v);
      if (seeded.current.has(node.id)) continue;
      seeded.current.add(node.id);
      const names = [...GPU_FIELDS.map((f) => `gpu*.${f.metric}`), "host.cpu_percent", "host.memory_used_mb"];
      api.nodeMetrics(node.id, { names, window: "10m", points: 300 }).then((m) => {
        for (const [name, cols] of Object.entries(m.series)) {
          store.seed(`${node.id}/${name}`, m.x, cols.avg);
        }
      }, () => undefined);
    }
  }, [nodes.data, store]);

  const all = jobs.data?.jobs ?? [];
  const running = all.filter((j) => ACTIVE.has(j.status));
  const queued = all.filter((j) => WAITING.has(j.status))
    .sort((a, b) => b.priority - a.priority || a.created_at - b.created_at);
  const gpus = (nodes.data ?? []).reduce((n, node) => n + node.gpus.length, 0);
  const busy = (nodes.data ?? []).reduce((n, node) => n + node.gpus.filter((g) => g.owner_job_id).length, 0);

  return (
    <div className="page">
      <PageHeader title="Dashboard" sub={nodes.data ? `${nodes.data.length} node${nodes.data.length === 1 ? "" : "s"} · ${busy} of ${gpus} GPUs busy · ${running.length} running · ${queued.length} queued` : undefined} />
      <ErrorBanner error={nodes.error} onRetry={nodes.reload} />
      <div className="dash">
        <section className="dash-nodes">
          {!nodes.data && !nodes.error && <Loading rows={6} />}
          {nodes.data?.length === 0 && (
            <Empty title="No nodes have joined" icon="nodes">A node appears here once its daemon starts with a GPU role.</Empty>
          )}
          {nodes.data?.map((node) => <NodeCard key={node.id} node={node} store={store} now={now} jobs={all} />)}
          <RecentRuns now={now} />
        </section>
        <aside className="dash-side">
          <RunningJobs jobs={running} now={now} />
          <Queue jobs={queued} now={now} />
          <RecentEvents now={now} />
        </aside>
      </div>
    </div>
  );
}

function NodeCard({ node, store, now, jobs }: { node: NodeInfo; store: LiveStore; now: number; jobs: Job[] }) {
  const { theme } = useTheme();
  const snap = node.snapshot;
  const host = snap?.host;
  const names = new Map(jobs.map((j) => [j.id, j.name]));
  const readings = new Map((snap?.gpus ?? []).map((g) => [g.index, g]));
  return (
    <article className="card node-card">
      <header className="card-head">
        <div className="card-title">
          <Link to={`/nodes?node=${encodeURIComponent(node.name)}`} className="strong">{node.name}</Link>
          <StatusBadge status={node.status} />
          {!node.accepting && <span className="badge badge-warn">not accepting</span>}
        </div>
        <div className="card-meta">
          <span title="Last heard from (heartbeat or sample)">seen <Ago ts={lastSeen(node)} now={now} /></span>
          {host && (
            <>
              <span className="meta-meter">CPU <Meter value={host.cpu_percent} label="CPU" /> {fmtPct(host.cpu_percent)}</span>
              <span className="meta-meter">RAM <Meter value={host.memory_used_mb} max={host.memory_total_mb ?? 0} label="RAM" />
                {fmtMiB(host.memory_used_mb)}</span>
            </>
          )}
        </div>
      </header>
      {node.conditions.length > 0 && (
        <div className="banner banner-warn compact"><Icon name="alert" size={14} />{node.conditions.join(" · ")}</div>
      )}
      {node.gpus.length === 0 ? (node.pooled ? (
        <Empty compact title="GPUs placed by Slurm for each job" icon="gpu">
          {pooledCapacity(node.pooled)}</Empty>
      ) : (
        <Empty compact title="No GPUs on this node" icon="gpu">{node.gpu_backend_note ?? `GPU backend: ${node.gpu_backend}`}</Empty>
      )) : (
        <div className="gpu-grid-wrap"><table className="gpu-grid">
          <thead>
            <tr><th>GPU</th><th>Job</th>{GPU_FIELDS.map((f) => <th key={f.metric}>{f.label}</th>)}</tr>
          </thead>
          <tbody>
            {node.gpus.map((slot) => {
              const g = readings.get(slot.index);
              return (
                <tr key={slot.index}>
                  <td className="gpu-name">
                    <b>{slot.index}</b>
                    <span className="muted" title={slot.model ?? undefined}>{slot.model ?? "GPU"}</span>
                  </td>
                  <td className="gpu-owner">
                    {slot.owner_job_id ? (
                      <Link to={`/jobs/${slot.owner_job_id}`} title={slot.owner_job_id}>
                        {slot.owner_job_name ?? names.get(slot.owner_job_id) ?? slot.owner_job_id}
                      </Link>
                    ) : g?.error ? <span className="text-bad" title={g.error}>error</span> : <span className="muted">idle</span>}
                  </td>
                  {GPU_FIELDS.map((f) => (
                    <td key={f.metric} className="spark-cell">
                      <span className="spark-value">{gpuValue(f.metric, g)}</span>
                      <Sparkline store={store} storeKey={gpuKey(node.id, slot.index, f.metric)} color={SPARK_COLORS[f.metric]}
                        theme={theme} range={sparkRange(f.metric, g, slot.memory_mb)} syncKey={`spark-${node.id}`} />
                    </td>
                  ))}
                </tr>
              );
            })}
          </tbody>
        </table></div>
      )}
      <footer className="card-foot muted">
        <span>{String(node.hardware.hostname ?? node.name)}</span>
        <span>{node.gpu_backend === "nvml" ? "NVML" : node.gpu_backend}</span>
        {!node.pooled && <span>CPU jobs {node.cpu_jobs}/{node.max_cpu_jobs}</span>}
        {host && <span>load {fmtValue(host.load1)}</span>}
        <span className="spark-legend">last 10 min</span>
      </footer>
    </article>
  );
}

function sparkRange(metric: string, g: GpuReading | undefined, memoryMb: number | null): [number, number] {
  switch (metric) {
    case "utilization": return [0, 100];
    case "memory_used_mb": return [0, g?.memory_total_mb ?? memoryMb ?? 1];
    case "temperature_c": return [20, 100];
    default: return [0, g?.power_limit_w ?? Math.max(100, (g?.power_w ?? 0) * 1.2)];
  }
}

function gpuValue(metric: string, g: GpuReading | undefined): string {
  if (!g) return "—";
  switch (metric) {
    case "utilization": return fmtPct(g.utilization_pct);
    case "memory_used_mb": return g.memory_total_mb ? `${fmtMiB(g.memory_used_mb)}` : fmtMiB(g.memory_used_mb);
    case "temperature_c": return g.temperature_c === null ? "—" : `${Math.round(g.temperature_c)}°C`;
    case "power_w": return g.power_w === null ? "—" : `${Math.round(g.power_w)} W`;
    default: return "—";
  }
}

/** The headline metric of a summary: the first loss, else the first metric with a direction. */
export function headline(summary: RunSummary | undefined): [string, number | null] | null {
  if (!summary) return null;
  const names = Object.keys(summary.metrics).sort();
  const pick = names.find((n) => /(^|\/)loss$/.test(n)) ?? names.find((n) => n.includes("loss")) ??
    names.find((n) => summary.metrics[n].direction) ?? names[0];
  if (!pick) return null;
  return [pick, summary.metrics[pick].latest?.value ?? null];
}

function RecentRuns({ now }: { now: number }) {
  const runs = useResource((s) => api.listRuns({ limit: 8 }, s), [], { live: ["runs"], pollMs: 5000 });
  const list = runs.data?.runs ?? [];
  const ids = list.map((r) => r.id);
  const summaries = useSummaries(ids, list.filter((r) => r.status === "RUNNING").map((r) => r.id));
  return (
    <section className="card">
      <header className="card-head"><h2>Recent runs</h2><Link to="/runs" className="muted small">all runs</Link></header>
      {runs.error && <ErrorBanner error={runs.error} />}
      {!runs.data && !runs.error && <Loading rows={4} />}
      {runs.data && !list.length && <Empty compact title="No runs yet" icon="runs">Runs appear when a job starts or a script calls gpuplane.init().</Empty>}
      {list.length > 0 && (
        <table className="table compact recent-runs">
          <tbody>
            {list.map((r) => {
              const s = summaries.get(r.id);
              const h = headline(s);
              return (
                <tr key={r.id} className="clickable" onClick={(e) => { if (!(e.target as HTMLElement).closest("a")) navigate(`/runs/${r.id}`); }}>
                  <td style={{ width: 110 }}><StatusBadge status={r.status} /></td>
                  <td><span className="run-swatch" style={{ background: colorOf(r.id) }} /><Link to={`/runs/${r.id}`}>{runLabel(r)}</Link>
                    {r.project && <span className="muted small"> · {r.project}</span>}</td>
                  <td className="mono small">{h ? <>{h[0]} <b>{fmtValue(h[1])}</b></> : ""}</td>
                  <td className="num mono small">{s?.progress.step != null ? `step ${fmtInt(s.progress.step)}` : ""}</td>
                  <td className="num small muted" style={{ width: 80 }}><Ago ts={r.created_at} now={now} /></td>
                </tr>
              );
            })}
          </tbody>
        </table>
      )}
    </section>
  );
}

function RunningJobs({ jobs, now }: { jobs: Job[]; now: number }) {
  const runIds = jobs.map((j) => j.run_id).filter((r): r is string => !!r);
  const key = runIds.join(",");
  const summaries = useResource(async (signal) => {
    const out = new Map<string, RunSummary>();
    await Promise.all(runIds.slice(0, 20).map((id) => api.runSummary(id, signal).then((s) => out.set(id, s), () => undefined)));
    return out;
  }, [key], { live: ["runs"], pollMs: 5000, liveGapMs: 5000 }); // up to 20 requests each
  return (
    <section className="card">
      <header className="card-head"><h2>Running</h2><Link to="/jobs?tab=running" className="muted small">all jobs</Link></header>
      {jobs.length === 0 ? <Empty compact title="Nothing is running" icon="jobs" /> : (
        <ul className="job-list">
          {jobs.map((j) => {
            const s = j.run_id ? summaries.data?.get(j.run_id) : undefined;
            const h = headline(s);
            const step = s?.progress.step;
            const max = s?.progress.max_steps;
            return (
              <li key={j.id}>
                <div className="job-line">
                  <Link to={`/jobs/${j.id}`} className="strong ellipsis">{j.name}</Link>
                  <span className="muted mono small">{j.gpu_indexes.length ? `GPU ${j.gpu_indexes.join(",")}` : "CPU"}</span>
                  <span className="muted small">{fmtDuration(now - (j.started_at ?? j.created_at))}</span>
                </div>
                {max ? <Meter value={step ?? 0} max={max} tone="run" label={`step ${step} of ${max}`} /> : null}
                <div className="job-sub small">
                  {j.run_id ? <Link to={`/runs/${j.run_id}`} className="muted">
                    {step !== null && step !== undefined ? `step ${fmtInt(step)}${max ? ` / ${fmtInt(max)}` : ""}` : "no metrics yet"}
                  </Link> : <span className="muted">no run</span>}
                  {h && <span className="mono">{h[0]} <b>{fmtValue(h[1])}</b></span>}
                </div>
              </li>
            );
          })}
        </ul>
      )}
    </section>
  );
}

function Queue({ jobs, now }: { jobs: Job[]; now: number }) {
  return (
    <section className="card">
      <header className="card-head"><h2>Queue</h2><span className="muted small">{jobs.length ? `${jobs.length} waiting` : ""}</span></header>
      {jobs.length === 0 ? <Empty compact title="The queue is empty" icon="jobs" /> : (
        <ol className="queue-list">
          {jobs.slice(0, 8).map((j, i) => (
            <li key={j.id}>
              <span className="queue-pos">{i + 1}</span>
              <Link to={`/jobs/${j.id}`} className="ellipsis">{j.name}</Link>
              <span className="muted small mono">{j.gpu ? `${j.gpu} GPU` : "CPU"}</span>
              {j.priority !== 0 && <span className="badge badge-info" title="Priority">p{j.priority}</span>}
              <span className="muted small">{fmtDuration(now - j.created_at)}</span>
            </li>
          ))}
          {jobs.length > 8 && <li className="muted small"><Link to="/jobs?tab=queued">{jobs.length - 8} more</Link></li>}
        </ol>
      )}
    </section>
  );
}

function RecentEvents({ now }: { now: number }) {
  const [events, setEvents] = useState<GpuEvent[] | null>(null);
  const [error, setError] = useState<Error | undefined>();
  useEffect(() => {
    const abort = new AbortController();
    api.listEvents({ severity: ["warning", "critical"], limit: 10 }, abort.signal)
      .then((r) => setEvents(r.events), (e) => { if (e.name !== "AbortError") setError(e); });
    return () => abort.abort();
  }, []);
  const stream = useEventStream(events ? "dash-events" : null,
    events ? { path: "/events/stream", query: { severity: "warning,critical" }, lastEventId: events[0]?.id ?? null } : null,
    (m) => {
      if (m.event !== "event") return;
      const ev = JSON.parse(m.data) as GpuEvent;
      setEvents((list) => (list?.some((e) => e.id === ev.id) ? list : [ev, ...(list ?? [])].slice(0, 10)));
    });
  return (
    <section className="card">
      <header className="card-head">
        <h2>Warnings</h2>
        <span className="head-right"><LiveDot state={stream.state} /><Link to="/events?severity=warning,critical" className="muted small">all events</Link></span>
      </header>
      <ErrorBanner error={error} />
      {events === null && !error && <Loading rows={3} />}
      {events?.length === 0 && <Empty compact title="No warnings" icon="check">Nothing has needed attention.</Empty>}
      {events && events.length > 0 && (
        <ul className="event-list">
          {events.map((e) => (
            <li key={e.id}>
              <SeverityBadge severity={e.severity} />
              <div className="event-body">
                <div><b className="mono small">{e.type}</b> <span className="muted small"><Ago ts={e.ts} now={now} /></span></div>
                <div className="small ellipsis" title={e.message ?? undefined}>{e.message}</div>
              </div>
            </li>
          ))}
        </ul>
      )}
    </section>
  );
}
