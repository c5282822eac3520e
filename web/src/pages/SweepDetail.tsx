// One sweep: its progress, its best combination so far, its trials (each one's values, its
// best value of the sweep's metric and at which step, its job), and the actions its state
// allows: pause, resume, retry the failed trials, and cancel (after a confirmation).

import { useState } from "react";
import { api, type ApiError } from "../api/client";
import { useNow, useResource } from "../api/hooks";
import type { SweepDetail as SweepDetailData, SweepVerb } from "../api/types";
import { ConfirmDialog } from "../components/Dialog";
import { Icon } from "../components/Icon";
import { Ago, CopyId, Empty, ErrorBanner, KeyValues, Loading, PageHeader, StatusBadge } from "../components/ui";
import { fmtDateTime, fmtInt, fmtValue } from "../lib/format";
import { allowedActions, parameterNames, progress, progressText, valueText } from "../lib/sweeps";
import { Link, navigate } from "../router/router";
import { SweepBar } from "./Sweeps";

export function SweepDetail({ id }: { id: string }) {
  const now = useNow(5000);
  const sweep = useResource((s) => api.getSweep(id, s), [id],
    { live: ["sweeps", "jobs", "runs"], pollMs: 3000, liveGapMs: 3000, keepPrevious: false });
  const [acting, setActing] = useState<SweepVerb | null>(null);
  const [actionError, setActionError] = useState<ApiError | Error | undefined>(undefined);
  const [confirmCancel, setConfirmCancel] = useState(false);
  const s = sweep.data;

  if (sweep.error && !s) {
    return (
      <div className="page">
        <PageHeader title="Sweep" />
        {sweep.error.status === 404 ? <Empty title="No such sweep" icon="sweeps">{id} is not known to this daemon. <Link to="/sweeps">All sweeps</Link></Empty>
          : <ErrorBanner error={sweep.error} onRetry={sweep.reload} />}
      </div>
    );
  }
  const act = async (verb: SweepVerb) => {
    setActing(verb);
    setActionError(undefined);
    try {
      await api.changeSweep(id, verb);
      sweep.reload();
    } catch (e) {
      setActionError(e as Error);
      throw e;
    } finally {
      setActing(null);
    }
  };
  const allowed = s ? allowedActions(s) : new Set();
  return (
    <div className="page">
      <PageHeader
        title={<><span className="crumb"><Link to="/sweeps">Sweeps</Link><Icon name="chevronRight" size={14} /></span>
          <span className="title-text">{s?.name ?? <span className="muted">…</span>}</span></>}
        sub={s && <><StatusBadge status={s.status} /> <CopyId id={s.id} />
          <span className="muted"> · {s.kind} · {fmtInt(s.counts.total)} trials{s.max_parallel ? ` · at most ${s.max_parallel} at once` : ""}</span>
          {s.paused && s.pause_reason && <span className="text-warn" data-pause-reason> · paused: {s.pause_reason}</span>}</>}>
        {s && allowed.has("pause") && <button className="btn" disabled={acting !== null} onClick={() => act("pause").catch(() => undefined)}>
          <Icon name="pause" size={14} />Pause</button>}
        {s && allowed.has("resume") && <button className="btn" disabled={acting !== null} onClick={() => act("resume").catch(() => undefined)}>
          <Icon name="play" size={14} />Resume</button>}
        {s && allowed.has("retry-failed") && <button className="btn" disabled={acting !== null}
          onClick={() => act("retry-failed").catch(() => undefined)}><Icon name="retry" size={14} />Retry failed ({s.counts.failed})</button>}
        {s && allowed.has("cancel") && <button className="btn" disabled={acting !== null} onClick={() => setConfirmCancel(true)}>
          <Icon name="stop" size={14} />Cancel sweep</button>}
      </PageHeader>
      <ErrorBanner error={actionError} />
      <ErrorBanner error={sweep.error} onRetry={sweep.reload} />
      {!s ? <Loading rows={8} /> : <SweepBody sweep={s} now={now} />}
      {confirmCancel && s && (
        <ConfirmDialog title={`Cancel sweep ${s.name}?`} confirm="Cancel sweep" danger onClose={() => setConfirmCancel(false)}
          onConfirm={() => act("cancel")}>
          <p>Its {s.counts.queued} queued trial{s.counts.queued === 1 ? "" : "s"} will not start, and its {s.counts.running} running
            one{s.counts.running === 1 ? "" : "s"} get SIGTERM, then SIGKILL after their grace. Finished trials, their runs and
            logs stay. A cancelled sweep cannot be resumed.</p>
        </ConfirmDialog>
      )}
    </div>
  );
}

function SweepBody({ sweep, now }: { sweep: SweepDetailData; now: number }) {
  const p = progress(sweep);
  const names = parameterNames(sweep.trials);
  const best = sweep.best;
  return (
    <>
      <div className="sweep-cards">
        <section className="card">
          <header className="card-head"><h2>Progress</h2><span className="muted small">created <Ago ts={sweep.created_at} now={now} /></span></header>
          <SweepBar sweep={sweep} />
          <p className="small" data-progress>{progressText(p)} of {fmtInt(p.total)}</p>
          <KeyValues items={[
            ["Command", <span className="mono">{sweep.command.join(" ")}</span>],
            ["Metric", sweep.metric ? <span className="mono">{sweep.metric} ({sweep.goal === "max" ? "highest" : "lowest"} is best)</span> : "none named"],
            ...(sweep.experiment ? [["Experiment", sweep.experiment_id
              ? <Link to={`/evaluations?experiment=${encodeURIComponent(sweep.experiment_id)}`}>{sweep.experiment}</Link>
              : sweep.experiment] as [string, React.ReactNode]] : []),
            ...(sweep.cancelled_at ? [["Cancelled", fmtDateTime(sweep.cancelled_at)] as [string, React.ReactNode]] : []),
          ]} />
        </section>
        <section className="card" data-best>
          <header className="card-head"><h2>Best combination</h2></header>
          {best ? (
            <>
              <p className="small"><b className="mono">{sweep.metric} {fmtValue(best.value)}</b>
                {best.step !== null && <span className="muted"> at step {fmtInt(best.step)}</span>}
                <span className="muted"> · trial </span><Link to={`/jobs/${best.job_id}`}>#{best.trial}</Link></p>
              <KeyValues items={Object.entries(best.values).map(([k, v]) => [k, <span className="mono">{valueText(v)}</span>])} />
            </>
          ) : <Empty compact title={sweep.metric ? "No value yet" : "No metric named"} icon="sweeps">
            {sweep.metric ? <>The best shows once a trial logs <code>{sweep.metric}</code>.</>
              : <>Submit the sweep with a metric (<code>--metric</code>) to rank its trials.</>}
          </Empty>}
        </section>
      </div>
      <div className="table-wrap">
        <table className="table fit trials-table">
          <thead><tr>
            <th className="num w-xs">#</th><th className="w-status">Status</th>
            {names.map((n) => <th key={n} className="mono" title={n}>{n}</th>)}
            <th className="num w-m" title={sweep.metric ?? undefined}>{sweep.metric ? `${sweep.metric} best` : "Best"}</th>
            <th className="num w-s col-wide">at step</th><th className="num w-xs col-wide">Attempt</th>
            <th className="w-l">Job</th><th>Note</th>
          </tr></thead>
          <tbody>
            {sweep.trials.map((t) => (
              <tr key={t.trial} data-trial={t.trial} className={best && best.trial === t.trial ? "best-row clickable" : "clickable"}
                onClick={(e) => {
                  if ((e.target as HTMLElement).closest("a,button")) return;
                  navigate(`/jobs/${t.job_id}`);
                }}>
                <td className="num mono">{t.trial}</td>
                <td><StatusBadge status={t.status} /></td>
                {names.map((n) => <td key={n} className="mono" title={`${n} = ${valueText(t.values[n])}`}>{valueText(t.values[n])}</td>)}
                <td className="num mono">{fmtValue(t.best)}</td>
                <td className="num mono col-wide">{t.step_of_best === null ? "" : fmtInt(t.step_of_best)}</td>
                <td className="num col-wide">{t.attempt}</td>
                <td><Link to={`/jobs/${t.job_id}`} className="mono">{t.job_id.slice(-8)}</Link>
                  {t.run_id && <> · <Link to={`/runs/${t.run_id}`}>run</Link></>}</td>
                <td className="small muted wrap">{t.failure_reason ?? t.queue_reason ?? ""}</td>
              </tr>
            ))}
          </tbody>
        </table>
      </div>
    </>
  );
}
