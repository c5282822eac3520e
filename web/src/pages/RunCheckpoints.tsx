// A run's checkpoints tab: each checkpoint's step, path, size, fingerprint, parent, the
// ranking metric's value at its step (the best marked), the other metrics nearest its step,
// and its evaluations. Deleted ones (retention) stay listed, struck through.

import { api } from "../api/client";
import { useResource } from "../api/hooks";
import type { CheckpointList, RunSummary } from "../api/types";
import { Empty, ErrorBanner, Loading } from "../components/ui";
import { checkpointRows, type CheckpointRow, type MetricCell, valueText } from "../lib/checkpoints";
import { fmtBytes, fmtDateTime, fmtInt, fmtValue } from "../lib/format";
import { primaryMetric } from "../lib/primary";

export function CheckpointsTab({ runId, summary }: { runId: string; summary: RunSummary | undefined }) {
  const primary = primaryMetric(summary);
  // The daemon ranks by the run's primary metric when one is set; otherwise ask it to rank by
  // the metric this page would call primary (an eval metric with a direction, else a loss).
  const asked = primary && !primary.chosen ? primary.name : null;
  const ckpts = useResource(summary ? (s) => api.runCheckpoints(runId, asked, s) : null, [runId, asked, !!summary],
    { live: ["checkpoints", "evaluations"], pollMs: 15_000 });
  if (ckpts.error) {
    if (ckpts.error.missingEndpoint) {
      return <Empty title="Checkpoints are not listed by this daemon" icon="runs">
        This version of gpuplaned has no <code>GET /api/v1/runs/{"{id}"}/checkpoints</code>, so there is nothing to rank.
      </Empty>;
    }
    return <ErrorBanner error={ckpts.error} onRetry={ckpts.reload} />;
  }
  const list = ckpts.data;
  if (!list) return <Loading rows={4} />;
  if (!list.checkpoints.length) {
    return <Empty title="No checkpoints registered for this run" icon="runs">
      Checkpoints a job saves under <code>checkpoints/</code>, <code>outputs/</code> or <code>runs/</code> are
      registered once complete; a script can also register each one with <code>run.log_checkpoint(path, step=step)</code>.
    </Empty>;
  }
  return <CheckpointsTable list={list} primaryChosen={!!primary?.chosen} />;
}

export function CheckpointsTable({ list, primaryChosen }: { list: CheckpointList; primaryChosen: boolean }) {
  const rows = checkpointRows(list);
  const better = list.direction === "minimize" ? "lower is better" : list.direction === "maximize" ? "higher is better" : "no direction";
  const hasFingerprint = rows.some((r) => r.fullFingerprint);
  const hasParent = rows.some((r) => r.parent);
  const others = (r: CheckpointRow) => r.metrics.filter((m) => m.name !== list.metric);
  const hasMetrics = rows.some((r) => others(r).length > 0);
  const hasEvaluations = rows.some((r) => r.evaluations.length > 0) || list.checkpoints.some((c) => Array.isArray(c.evaluations));
  return (
    <>
      <p className="muted small tab-note">
        {list.metric ? <>Ranked by <b className="mono">{list.metric}</b> ({better}){primaryChosen ? ", the primary metric" : ""}
          {!list.best_id && ": no checkpoint has a value yet"}.</> : "No metric to rank by: this run logged none with a direction."}
        {!primaryChosen && " The ☆ on a metric's chart (Metrics tab) makes it the primary metric."}
      </p>
      <div className="table-wrap">
        <table className="table fit checkpoints-table">
          <thead><tr><th className="w-l">Step</th><th className="w-path">Path</th><th className="num w-s">Size</th>
            {hasFingerprint && <th className="w-l">Fingerprint</th>}
            {hasParent && <th className="w-m">Parent</th>}
            {list.metric && <th className="num mono w-m" title={list.metric}>{list.metric}</th>}
            {hasMetrics && <th>Metrics at its step</th>}
            {hasEvaluations && <th className="w-evals">Evaluations</th>}
            <th className="w-xl">Registered</th></tr></thead>
          <tbody>
            {rows.map((r) => (
              <tr key={r.id} data-checkpoint={r.id} className={[r.best ? "best-row" : "", r.deleted ? "deleted-row" : ""].join(" ").trim() || undefined}>
                <td className="mono">{fmtInt(r.step)}
                  {r.best && <span className="badge badge-ok best" title="The best by the ranking metric">best</span>}
                  {r.deleted && <span className="badge badge-off best" title="Its file was deleted by retention">deleted</span>}</td>
                <td className="mono ellipsis ckpt-path" title={r.path}>{r.path}</td>
                <td className="num">{fmtBytes(r.size)}</td>
                {hasFingerprint && <td className="mono small" title={r.fullFingerprint ?? "no fingerprint: registered by the script"}>{r.fingerprint ?? "—"}</td>}
                {hasParent && <td className="mono small" title={r.parent?.id}>{r.parent ? (r.parent.step !== null ? `step ${fmtInt(r.parent.step)}` : "resumed from another run") : "—"}</td>}
                {list.metric && <td className="num mono">{valueText(r.metricValue, fmtValue)}</td>}
                {hasMetrics && <td className="small wrap"><Metrics cells={others(r)} /></td>}
                {hasEvaluations && <td className="small wrap">{r.evaluations.length === 0 ? <span className="muted">—</span> : (
                  <ul className="ckpt-evals">{r.evaluations.map((e) => (
                    <li key={e.id}><b>{e.label}</b>{e.status !== "SUCCEEDED" && <span className="muted"> ({e.status.toLowerCase()})</span>}
                      {e.metrics.length > 0 && <>: <Metrics cells={e.metrics} /></>}</li>
                  ))}</ul>)}</td>}
                <td title={fmtDateTime(r.created)}>{fmtDateTime(r.created)}</td>
              </tr>
            ))}
          </tbody>
        </table>
      </div>
    </>
  );
}

function Metrics({ cells }: { cells: MetricCell[] }) {
  if (!cells.length) return <span className="muted">—</span>;
  return <span className="mono">{cells.map((m, i) => (
    <span key={m.name}>{i > 0 && " · "}{m.name} {valueText(m.value, fmtValue)}</span>
  ))}</span>;
}
