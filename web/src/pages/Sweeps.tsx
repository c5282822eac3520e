// Sweeps: every sweep, newest first, with its progress (trials done, running, queued,
// failed), its best value so far and the trial that has it, and its state.

import { api } from "../api/client";
import { useNow, useResource } from "../api/hooks";
import type { Sweep } from "../api/types";
import { Ago, CopyId, Empty, ErrorBanner, Loading, PageHeader, StatusBadge } from "../components/ui";
import { fmtInt, fmtValue } from "../lib/format";
import { progress, progressText, valuesText } from "../lib/sweeps";
import { Link, navigate } from "../router/router";

export function Sweeps() {
  const now = useNow(5000);
  const sweeps = useResource((s) => api.listSweeps(s), [], { live: ["sweeps", "jobs"], pollMs: 3000 });
  const list = sweeps.data ?? [];
  return (
    <div className="page">
      <PageHeader title="Sweeps" sub={sweeps.data ? `${list.length} sweep${list.length === 1 ? "" : "s"}` : undefined} />
      <ErrorBanner error={sweeps.error} onRetry={sweeps.reload} />
      {!sweeps.data && !sweeps.error ? <Loading rows={6} /> : list.length === 0 ? (
        <Empty title="No sweeps yet" icon="sweeps">
          A sweep runs a job over a grid, random draws or a list of values, one trial each:
          <code>gpuplanectl sweep submit --grid lr=0.1,0.01 -- python train.py --lr {"{lr}"}</code>
        </Empty>
      ) : (
        <div className="table-wrap">
          <table className="table fit sweeps-table">
            <thead><tr>
              <th className="w-status">Status</th><th className="w-name">Sweep</th><th>Progress</th>
              <th className="w-name">Best</th><th className="w-l col-wide">Metric</th><th className="w-m">Created</th>
            </tr></thead>
            <tbody>
              {list.map((s) => <SweepRow key={s.id} sweep={s} now={now} />)}
            </tbody>
          </table>
        </div>
      )}
    </div>
  );
}

function SweepRow({ sweep, now }: { sweep: Sweep; now: number }) {
  const p = progress(sweep);
  const text = progressText(p);
  return (
    <tr className="clickable" data-sweep={sweep.name} onClick={(e) => {
      if ((e.target as HTMLElement).closest("a,button")) return;
      navigate(`/sweeps/${sweep.id}`);
    }}>
      <td><StatusBadge status={sweep.status} /></td>
      <td>
        <div className="clip" title={sweep.name}><Link to={`/sweeps/${sweep.id}`} className="strong">{sweep.name}</Link></div>
        <div className="sub"><CopyId id={sweep.id} /><span className="muted"> · {sweep.kind} · {fmtInt(sweep.counts.total)} trials</span></div>
      </td>
      <td title={text}>
        <SweepBar sweep={sweep} />
        <div className="sub muted" data-progress>{text}</div>
      </td>
      <td data-best title={sweep.best ? valuesText(sweep.best.values) : undefined}>
        {sweep.best ? <>
          <b className="mono">{fmtValue(sweep.best.value)}</b>
          <span className="muted"> · trial <Link to={`/jobs/${sweep.best.job_id}`}>#{sweep.best.trial}</Link></span>
          <div className="sub mono muted">{valuesText(sweep.best.values)}</div>
        </> : <span className="muted">{sweep.metric ? "no value yet" : "no metric named"}</span>}
      </td>
      <td className="col-wide mono" title={sweep.metric ?? undefined}>{sweep.metric ? `${sweep.metric} (${sweep.goal})` : "—"}</td>
      <td><Ago ts={sweep.created_at} now={now} /></td>
    </tr>
  );
}

/** One bar: done, failed, running and queued trials as segments of the total. */
export function SweepBar({ sweep }: { sweep: Pick<Sweep, "counts"> }) {
  const c = sweep.counts;
  const pct = (n: number) => `${c.total ? (n / c.total) * 100 : 0}%`;
  return (
    <div className="sweep-bar" role="img" aria-label={progressText(progress(sweep))}>
      <i className="seg-ok" style={{ width: pct(c.succeeded) }} />
      <i className="seg-bad" style={{ width: pct(c.failed) }} />
      <i className="seg-run" style={{ width: pct(c.running) }} />
      <i className="seg-off" style={{ width: pct(c.cancelled) }} />
    </div>
  );
}
