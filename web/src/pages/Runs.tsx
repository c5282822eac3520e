// Runs: every run (job attempts and SDK runs) with its key config values and summary
// metrics; filter by text, status and project, sort by any column, pick runs to compare.
// Filters, sort and the metric columns are in the URL.

import { useMemo, useState } from "react";
import { api } from "../api/client";
import { useNow, useResource } from "../api/hooks";
import { RUN_STATES, type Run, type RunSummary } from "../api/types";
import { colorOf } from "../charts/colors";
import { Icon } from "../components/Icon";
import { Ago, Empty, ErrorBanner, Loading, PageHeader, StatusBadge } from "../components/ui";
import { metricSourceLabel } from "../lib/checkpoints";
import { fmtDuration, fmtInt, fmtValue } from "../lib/format";
import { flatConfig, runLabel, sortRuns, varyingConfigKeys } from "../lib/runs";
import { defaultMetricColumns, useSummaries } from "../lib/summaries";
import { Link, navigate, useUrlState } from "../router/router";
import { int, list, oneOf, str } from "../router/urlState";

const schema = {
  q: str(), status: list(RUN_STATES), project: str(), sort: str("-created"), cols: list(), n: int(200, 1, 10_000),
  val: oneOf(["latest", "best"] as const, "latest"),
};

export function Runs() {
  const [view, setView] = useUrlState(schema);
  const now = useNow(5000);
  const runs = useResource((s) => api.listRuns({ limit: view.n }, s), [view.n], { live: ["runs"], pollMs: 5000 });
  const listed = runs.data?.runs ?? [];
  const all = listed;
  const ids = useMemo(() => all.map((r) => r.id), [all]);
  const running = useMemo(() => all.filter((r) => r.status === "RUNNING").map((r) => r.id), [all]);
  const summaries = useSummaries(ids, running);
  const [selected, setSelected] = useState<Set<string>>(new Set());
  const [picking, setPicking] = useState(false);

  const projects = useMemo(() => [...new Set(all.map((r) => r.project).filter((p): p is string => !!p))].sort(), [all]);
  const hasProject = projects.length > 0;
  const hasExperiment = all.some((r) => r.experiment);
  const configKeys = useMemo(() => varyingConfigKeys(all), [all]);
  const metricNames = useMemo(() => {
    const names = new Set<string>();
    for (const s of summaries.values()) for (const n of Object.keys(s.metrics)) names.add(n);
    return [...names].sort();
  }, [summaries]);
  const metricCols = view.cols.length ? view.cols : defaultMetricColumns(summaries.values());

  const rows = useMemo(() => {
    const q = view.q.trim().toLowerCase();
    const filtered = all.filter((r) => {
      if (view.status.length && !view.status.includes(r.status)) return false;
      if (view.project && r.project !== view.project) return false;
      if (!q) return true;
      const hay = [r.id, r.name, r.project, r.experiment, r.job_id, ...(r.tags ?? []), ...Object.entries(flatConfig(r.config)).map(([k, v]) => `${k}=${v}`)]
        .filter(Boolean).join(" ").toLowerCase();
      return q.split(/\s+/).every((t) => hay.includes(t));
    });
    return sortRuns(filtered, view.sort, summaries);
  }, [all, view.q, view.status, view.project, view.sort, summaries]);

  const toggle = (id: string) => setSelected((s) => {
    const next = new Set(s);
    if (next.has(id)) next.delete(id);
    else next.add(id);
    return next;
  });
  const allSelected = rows.length > 0 && rows.every((r) => selected.has(r.id));

  const header = (label: string, key: string, className?: string) => {
    const active = view.sort === key || view.sort === `-${key}`;
    const desc = view.sort === `-${key}`;
    return (
      <th key={key} className={className} title={label} aria-sort={active ? (desc ? "descending" : "ascending") : "none"}>
        <button className={active ? "sort on" : "sort"} onClick={() => setView({ sort: active && !desc ? `-${key}` : key })}>
          {label}{active && <span className="sort-arrow">{desc ? "↓" : "↑"}</span>}
        </button>
      </th>
    );
  };

  return (
    <div className="page">
      <PageHeader title="Runs" sub={runs.data ? `${rows.length} of ${all.length}${runs.data.next_cursor ? "+" : ""} runs` : undefined}>
        <button className="btn btn-primary" disabled={selected.size < 1}
          onClick={() => navigate(`/compare?runs=${[...selected].join(",")}`)}>
          <Icon name="compare" size={14} />Compare{selected.size ? ` ${selected.size}` : ""}
        </button>
      </PageHeader>
      <div className="toolbar">
        <div className="search grow">
          <Icon name="search" size={14} />
          <input value={view.q} onChange={(e) => setView({ q: e.target.value })} placeholder="Filter: name, id, project, tag, lr=0.001"
            aria-label="Filter runs" />
        </div>
        <div className="chips" role="group" aria-label="Status">
          {RUN_STATES.map((s) => {
            const on = view.status.includes(s);
            return <button key={s} className={on ? "chip on" : "chip"} aria-pressed={on}
              onClick={() => setView({ status: on ? view.status.filter((x) => x !== s) : [...view.status, s] })}>{s.toLowerCase()}</button>;
          })}
        </div>
        {hasProject && (
          <select value={view.project} onChange={(e) => setView({ project: e.target.value })} aria-label="Project">
            <option value="">all projects</option>
            {projects.map((p) => <option key={p}>{p}</option>)}
          </select>
        )}
        <div className="col-picker">
          <button className="btn btn-sm" onClick={() => setPicking(!picking)} aria-expanded={picking}>
            Metrics <Icon name="chevronDown" size={12} />
          </button>
          {picking && (
            <div className="popover" onMouseLeave={() => setPicking(false)}>
              <div className="popover-head">
                <span>Metric columns</span>
                <span className="segmented mini">
                  <button className={view.val === "latest" ? "on" : ""} onClick={() => setView({ val: "latest" })}>latest</button>
                  <button className={view.val === "best" ? "on" : ""} onClick={() => setView({ val: "best" })}>best</button>
                </span>
              </div>
              {metricNames.length === 0 && <div className="muted small">No run has metrics yet.</div>}
              {metricNames.map((n) => {
                const on = metricCols.includes(n);
                return (
                  <label key={n} className="check">
                    <input type="checkbox" checked={on} onChange={() => setView({ cols: on ? metricCols.filter((c) => c !== n) : [...metricCols, n].sort() })} />
                    <span className="mono">{n}</span>
                  </label>
                );
              })}
            </div>
          )}
        </div>
      </div>
      <ErrorBanner error={runs.error} onRetry={runs.reload} />
      {!runs.data && !runs.error ? <Loading rows={10} /> : rows.length === 0 ? (
        <Empty title={all.length ? "No run matches the filter" : "No runs yet"} icon="runs">
          {all.length ? null : <>A run starts with each job attempt, or from a script: <code>run = gpuplane.init(project="…")</code> then <code>run.log({"{"}"loss": loss{"}"})</code>.</>}
        </Empty>
      ) : (
        <div className="table-wrap">
          <table className="table fit runs-table">
            <thead>
              <tr>
                <th className="check-col w-check"><input type="checkbox" aria-label="Select all" checked={allSelected}
                  onChange={() => setSelected(allSelected ? new Set() : new Set(rows.map((r) => r.id)))} /></th>
                {header("Status", "status", "w-status")}
                {header("Run", "name", "w-name")}
                {hasProject && header("Project", "project", "w-m col-wide")}
                {hasExperiment && header("Experiment", "experiment", "w-l col-wide")}
                {configKeys.map((k) => header(k, `c:${k}`, "num cfg-col"))}
                {metricCols.map((m) => header(m, `${view.val === "best" ? "b" : "m"}:${m}`, "num metric-col"))}
                {header("Step", "step", "num w-s")}
                {header("Duration", "duration", "num w-s col-wide")}
                {header("Created", "created", "w-m")}
              </tr>
            </thead>
            <tbody>
              {rows.map((r) => (
                <RunRow key={r.id} run={r} summary={summaries.get(r.id)} now={now} selected={selected.has(r.id)}
                  onToggle={() => toggle(r.id)} hasProject={hasProject} hasExperiment={hasExperiment}
                  configKeys={configKeys} metricCols={metricCols} which={view.val} />
              ))}
            </tbody>
          </table>
          {runs.data?.next_cursor && (
            <div className="table-more"><button className="btn btn-sm" onClick={() => setView({ n: view.n + 200 })}>Load 200 more</button></div>
          )}
        </div>
      )}
    </div>
  );
}

function RunRow({ run, summary, now, selected, onToggle, hasProject, hasExperiment, configKeys, metricCols, which }: {
  run: Run; summary: RunSummary | undefined; now: number; selected: boolean; onToggle: () => void; hasProject: boolean;
  hasExperiment: boolean; configKeys: string[]; metricCols: string[]; which: "latest" | "best" }) {
  const cfg = flatConfig(run.config);
  return (
    <tr className={selected ? "selected clickable" : "clickable"} onClick={(e) => {
      if ((e.target as HTMLElement).closest("a,button,input")) return;
      navigate(`/runs/${run.id}`);
    }}>
      <td className="check-col"><input type="checkbox" checked={selected} onChange={onToggle} aria-label={`Select ${runLabel(run)}`} /></td>
      <td><StatusBadge status={run.status} /></td>
      <td>
        <div className="clip" title={[runLabel(run), run.project, run.experiment].filter(Boolean).join(" · ")}>
          <span className="run-swatch" style={{ background: colorOf(run.id) }} />
          <Link to={`/runs/${run.id}`} className="strong">{runLabel(run)}</Link></div>
        <div className="sub muted mono">{run.source === "job" && run.job_id ? `job attempt ${run.attempt ?? ""}` : run.source === "import" ? "imported" : "sdk"}
          {metricSourceLabel(run.metric_sources) && !(run.source === "sdk" && metricSourceLabel(run.metric_sources) === "SDK")
            && <span title="Where its metrics came from"> · {metricSourceLabel(run.metric_sources)}</span>}
          {run.tags?.map((t) => <span key={t} className="tag">{t}</span>)}</div>
      </td>
      {hasProject && <td className="col-wide" title={run.project ?? undefined}>{run.project ?? ""}</td>}
      {hasExperiment && <td className="col-wide" title={run.experiment ?? undefined}>{run.experiment ?? ""}</td>}
      {configKeys.map((k) => {
        const text = cfg[k] === undefined ? "" : fmtConfig(cfg[k]);
        return <td key={k} className="num mono" title={text ? `${k} = ${text}` : undefined}>{text}</td>;
      })}
      {metricCols.map((m) => {
        const ms = summary?.metrics[m];
        const point = which === "best" ? ms?.best : ms?.latest;
        return (
          <td key={m} className="num mono" title={point?.step !== undefined && point?.step !== null ? `step ${point.step}` : undefined}>
            {point ? fmtValue(point.value) : ""}
            {ms?.trend && which === "latest" && <span className={`trend trend-${ms.trend}`} title={ms.trend}>
              {ms.trend === "decreasing" ? "↘" : ms.trend === "increasing" ? "↗" : "→"}</span>}
          </td>
        );
      })}
      <td className="num mono">{summary?.progress.step !== undefined && summary?.progress.step !== null ? fmtInt(summary.progress.step) : ""}</td>
      <td className="num col-wide">{run.started_at ? fmtDuration((run.finished_at ?? now) - run.started_at) : ""}</td>
      <td><Ago ts={run.created_at} now={now} /></td>
    </tr>
  );
}

function fmtConfig(v: unknown): string {
  if (typeof v === "number") return fmtValue(v);
  if (typeof v === "string") return v;
  return JSON.stringify(v);
}
