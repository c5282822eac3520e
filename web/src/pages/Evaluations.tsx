// Evaluations: every evaluation of an experiment's checkpoints (GET /experiments/{id}/evaluations),
// one row each, a column per metric any of them reported. The experiment is picked by project,
// or comes from a link (a run page's "Evaluations": ?experiment=<id>).

import { useMemo } from "react";
import { api } from "../api/client";
import { useResource } from "../api/hooks";
import type { Evaluation } from "../api/types";
import { CopyId, Empty, ErrorBanner, Loading, PageHeader, StatusBadge } from "../components/ui";
import { evaluationColumns, evaluationLabel, valueText } from "../lib/checkpoints";
import { fmtDateTime, fmtDuration, fmtInt, fmtValue, shortId } from "../lib/format";
import { Link, useUrlState } from "../router/router";
import { str } from "../router/urlState";

const schema = { project: str(), experiment: str() };

export function Evaluations() {
  const [view, setView] = useUrlState(schema);
  const projects = useResource((s) => api.listProjects(s), []);
  // From a link only the experiment's id is known: its project comes with it.
  const linked = useResource(view.experiment && !view.project
    ? (s) => api.getExperiment(view.experiment, s) : null, [view.experiment, view.project]);
  const project = view.project || linked.data?.project || "";
  const experiments = useResource(project ? (s) => api.listExperiments(project, s) : null, [project]);
  const evals = useResource(view.experiment ? (s) => api.experimentEvaluations(view.experiment, s) : null,
    [view.experiment], { live: ["evaluations"], pollMs: 15_000, keepPrevious: false });
  const experimentName = experiments.data?.find((e) => e.id === view.experiment)?.name ?? linked.data?.name;

  return (
    <div className="page">
      <PageHeader title="Evaluations" sub={experimentName ? <>{project} / {experimentName}</> : "per experiment"} />
      <div className="toolbar">
        <select aria-label="Project" value={project} onChange={(e) => setView({ project: e.target.value, experiment: "" })}>
          <option value="">Project…</option>
          {(projects.data ?? []).map((p) => <option key={p.id} value={p.name}>{p.name}</option>)}
        </select>
        <select aria-label="Experiment" value={view.experiment} disabled={!project}
          onChange={(e) => setView({ project, experiment: e.target.value })}>
          <option value="">Experiment…</option>
          {(experiments.data ?? []).map((e) => <option key={e.id} value={e.id}>{e.name}</option>)}
        </select>
      </div>
      <ErrorBanner error={projects.error ?? experiments.error} onRetry={projects.reload} />
      {!view.experiment ? (
        <Empty title="Pick an experiment" icon="evals">Its checkpoints' evaluations are listed here, one row each.</Empty>
      ) : evals.error?.missingEndpoint ? (
        <Empty title="Evaluations are not listed by this daemon" icon="evals">
          This version of gpuplaned has no <code>GET /api/v1/experiments/{"{id}"}/evaluations</code>.
        </Empty>
      ) : evals.error ? <ErrorBanner error={evals.error} onRetry={evals.reload} />
        : !evals.data ? <Loading rows={5} /> : <EvaluationsTable evaluations={evals.data} />}
    </div>
  );
}

export function EvaluationsTable({ evaluations }: { evaluations: Evaluation[] }) {
  const columns = useMemo(() => evaluationColumns(evaluations), [evaluations]);
  const rows = useMemo(() => [...evaluations].sort((a, b) => b.created_at - a.created_at), [evaluations]);
  if (!rows.length) {
    return <Empty title="No evaluations in this experiment" icon="evals">
      Evaluate a checkpoint with <code>gpuplanectl ckpt eval CKPT -- python eval.py {"{checkpoint}"}</code>, or give a job
      an <code>evaluate</code> policy.
    </Empty>;
  }
  return (
    <div className="table-wrap">
      <table className="table evaluations-table">
        <thead><tr><th>Checkpoint</th><th>Evaluation</th><th>Status</th>
          {columns.map((c) => <th key={c} className="num mono">{c}</th>)}
          <th className="num">Runtime</th><th>Finished</th></tr></thead>
        <tbody>
          {rows.map((e) => {
            const step = e.checkpoint_step ?? null;
            const runId = e.checkpoint_run_id ?? null;
            const path = e.checkpoint_path ?? null;
            return (
              <tr key={e.id} data-evaluation={e.id}>
                <td className="small">
                  {runId ? <Link to={`/runs/${runId}?tab=checkpoints`} className="mono">{step !== null ? `step ${fmtInt(step)}` : shortId(e.checkpoint_id)}</Link>
                    : <span className="mono">{step !== null ? `step ${fmtInt(step)}` : <CopyId id={e.checkpoint_id} />}</span>}
                  {path && <div className="muted mono ellipsis ckpt-path" title={path}>{path}</div>}
                </td>
                <td>{evaluationLabel(e)}{e.job_id && <> · <Link to={`/jobs/${e.job_id}`} className="mono small">{shortId(e.job_id)}</Link></>}</td>
                <td title={e.error ?? undefined}><StatusBadge status={e.status} /></td>
                {columns.map((c) => <td key={c} className="num mono">{valueText(e.metrics?.[c] ?? null, fmtValue)}</td>)}
                <td className="num">{e.runtime_s === null || e.runtime_s === undefined ? "—" : fmtDuration(e.runtime_s * 1000)}</td>
                <td>{e.finished_at ? fmtDateTime(e.finished_at) : <span className="muted">{e.status.toLowerCase()}</span>}</td>
              </tr>
            );
          })}
        </tbody>
      </table>
    </div>
  );
}
