// Events: every event the daemon recorded, newest first, filtered by severity and type
// (and by node, job or run from a link), following new ones live over SSE.

import { useEffect, useMemo, useState } from "react";
import { api } from "../api/client";
import { useEventStream, useNow, useResource } from "../api/hooks";
import { SEVERITIES, type GpuEvent } from "../api/types";
import { Icon } from "../components/Icon";
import { Ago, CopyId, Empty, ErrorBanner, LiveDot, Loading, PageHeader, SeverityBadge } from "../components/ui";
import { fmtDateTime, fmtInt, fmtTime, shortId } from "../lib/format";
import { eventNodeName } from "../lib/nodeLink";
import { Link, useUrlState } from "../router/router";
import { bool, list, str } from "../router/urlState";

// The rules' event types, as gpuplaned.domain.event_types lists them (a type outside it is a 400).
const KNOWN_TYPES = ["CHECKPOINT_CREATED", "CHECKPOINT_DELETED", "DISK_LOW", "DISK_OK", "EVALUATION_FINISHED", "GPU_LOST",
  "GPU_PINNING_VIOLATION", "GPU_RECOVERED", "GPU_UNDERUTILIZED", "JOB_FAILED", "JOB_TIMEOUT", "LOSS_NAN", "LOSS_SPIKE", "OOM",
  "OVERFITTING_SUSPECTED", "POLICY_ACTION", "POLICY_SKIPPED", "RUN_STALLED", "TB_FILE_REPLACED", "TB_RECORD_SKIPPED",
  "USER_EVENT"];
const schema = { severity: list(SEVERITIES), type: list(), node_id: str(), job_id: str(), run_id: str(), live: bool(true) };
const PAGE = 200;

export function Events() {
  const [view, setView] = useUrlState(schema);
  const now = useNow(5000);
  const filter = { severity: view.severity, type: view.type, node_id: view.node_id || undefined, job_id: view.job_id || undefined,
    run_id: view.run_id || undefined };
  const filterKey = JSON.stringify(filter);
  const nodes = useResource((s) => api.listNodes(s), []);
  const nodeNames = useMemo(() => new Map((nodes.data ?? []).map((n) => [n.id, n.name])), [nodes.data]);
  const [older, setOlder] = useState<GpuEvent[]>([]);
  const [cursor, setCursor] = useState<string | null>(null);
  const [fresh, setFresh] = useState<GpuEvent[]>([]);
  const first = useResource(async (s) => {
    const page = await api.listEvents({ ...filter, limit: PAGE }, s);
    return page;
  }, [filterKey], { keepPrevious: false });
  useEffect(() => {
    setOlder([]);
    setFresh([]);
    setCursor(first.data?.next_cursor ?? null);
  }, [first.data]);

  const stream = useEventStream(view.live && first.data ? `events/${filterKey}` : null,
    { path: "/events/stream", query: { severity: view.severity, type: view.type, node_id: filter.node_id, job_id: filter.job_id,
      run_id: filter.run_id }, lastEventId: first.data?.events[0]?.id ?? "0" },
    (m) => {
      if (m.event !== "event") return;
      const ev = JSON.parse(m.data) as GpuEvent;
      setFresh((l) => (l.some((e) => e.id === ev.id) ? l : [ev, ...l].slice(0, 2000)));
    });

  const loadOlder = async () => {
    if (!cursor) return;
    const page = await api.listEvents({ ...filter, limit: PAGE, cursor });
    setOlder((o) => [...o, ...page.events]);
    setCursor(page.next_cursor);
  };

  const events = useMemo(() => {
    const seen = new Set<string>();
    return [...fresh, ...(first.data?.events ?? []), ...older].filter((e) => (seen.has(e.id) ? false : (seen.add(e.id), true)));
  }, [fresh, first.data, older]);
  // A forgotten node's name, as its events kept it: an event written after the forget (a run's
  // end, say) has none of its own, and takes the one its older events keep.
  const names = useMemo(() => {
    const known = new Map(nodeNames);
    for (const e of events) {
      const kept = e.node_id && !known.has(e.node_id) ? eventNodeName(e, known) : null;
      if (e.node_id && kept) known.set(e.node_id, kept);
    }
    return known;
  }, [events, nodeNames]);
  const types = useMemo(() => [...new Set([...KNOWN_TYPES, ...events.map((e) => e.type), ...view.type])].sort(), [events, view.type]);
  const scoped = [["node", view.node_id, "node_id"], ["job", view.job_id, "job_id"], ["run", view.run_id, "run_id"]] as const;

  return (
    <div className="page">
      <PageHeader title="Events" sub={first.data ? `${events.length}${cursor ? "+" : ""} shown` : undefined}>
        <button className={view.live ? "btn on" : "btn"} aria-pressed={view.live} onClick={() => setView({ live: !view.live })}>
          {view.live ? <LiveDot state={stream.state} /> : <span className="live live-closed"><i />paused</span>}
        </button>
      </PageHeader>
      <div className="toolbar">
        <div className="chips" role="group" aria-label="Severity">
          {SEVERITIES.map((s) => {
            const on = view.severity.includes(s);
            return <button key={s} className={on ? `chip on sev-${s}` : "chip"} aria-pressed={on}
              onClick={() => setView({ severity: on ? view.severity.filter((x) => x !== s) : [...view.severity, s] })}>{s}</button>;
          })}
        </div>
        <select aria-label="Filter by rule" value="" onChange={(e) => e.target.value && setView({ type: [...view.type, e.target.value] })}>
          <option value="">{view.type.length ? "Add rule…" : "All rules"}</option>
          {types.filter((t) => !view.type.includes(t)).map((t) => <option key={t} value={t}>{t}</option>)}
        </select>
        {view.type.map((t) => (
          <button key={t} className="chip on" onClick={() => setView({ type: view.type.filter((x) => x !== t) })} aria-label={`Remove ${t}`}>
            {t}<Icon name="x" size={11} />
          </button>
        ))}
        {scoped.filter(([, v]) => v).map(([label, v, k]) => (
          <button key={k} className="chip on" onClick={() => setView({ [k]: "" } as Partial<typeof view>)}>
            {label} {shortId(v)}<Icon name="x" size={11} />
          </button>
        ))}
      </div>
      <ErrorBanner error={first.error} onRetry={first.reload} />
      {!first.data && !first.error ? <Loading rows={10} /> : events.length === 0 ? (
        <Empty title="No events match" icon="events">{view.severity.length || view.type.length ? "Try fewer filters." : "Events appear as jobs run and nodes report."}</Empty>
      ) : (
        <div className="table-wrap">
          <table className="table fit events-table">
            <thead><tr><th className="w-xl">Time</th><th className="w-m">Severity</th><th className="w-xl">Type</th><th>Message</th>
              <th className="w-xl">Subject</th><th className="num w-s">Step</th></tr></thead>
            <tbody>
              {events.map((e) => (
                <tr key={e.id} className={fresh.includes(e) ? "fresh" : undefined}>
                  <td title={fmtDateTime(e.ts)} className="nowrap"><span className="mono small">{fmtTime(e.ts)}</span> <span className="muted small"><Ago ts={e.ts} now={now} /></span></td>
                  <td><SeverityBadge severity={e.severity} /></td>
                  <td title={e.type}><button className="link-btn mono small" onClick={() => !view.type.includes(e.type) && setView({ type: [...view.type, e.type] })}
                    title="Show only this type">{e.type}</button></td>
                  <td className="msg wrap">{e.message}
                    {Object.keys(e.context ?? {}).length > 0 && <details className="inline"><summary className="muted small">context</summary>
                      <pre className="ctx small">{JSON.stringify(e.context, null, 2)}</pre></details>}</td>
                  <td className="small wrap"><span className="subject">
                    {e.run_id && <Link to={`/runs/${e.run_id}`} className="mono">{shortId(e.run_id)}</Link>}
                    {e.job_id && <Link to={`/jobs/${e.job_id}`} className="mono">{shortId(e.job_id)}</Link>}
                    {e.node_id && (nodeNames.has(e.node_id) ? <Link to={`/nodes?node=${e.node_id}`}>{nodeNames.get(e.node_id)}</Link>
                      : <span data-forgotten-node={e.node_id} title={`node ${e.node_id}: no longer known to the server (forgotten)`}>
                        {eventNodeName(e, names) ?? shortId(e.node_id)}{nodes.data && <span className="muted"> (forgotten)</span>}</span>)}
                    {!e.run_id && !e.job_id && !e.node_id && <CopyId id={e.id} />}
                  </span></td>
                  <td className="num mono">{e.step === null ? "" : fmtInt(e.step)}</td>
                </tr>
              ))}
            </tbody>
          </table>
          {cursor && <div className="table-more"><button className="btn btn-sm" onClick={loadOlder}>Load older</button></div>}
        </div>
      )}
    </div>
  );
}
