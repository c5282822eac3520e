// One job: what it runs and on which node, its state and actions, and its output: the last
// lines, then live over SSE (resuming where it left off after a drop), in a virtual-scrolling
// view with a stdout/stderr switch, an attempt picker and a filter. Whether the output is live
// or only the tail the server keeps (the job's remote node is offline) is said above it.

import { useEffect, useMemo, useRef, useState } from "react";
import { api } from "../api/client";
import { useEventStream, useNow, useResource } from "../api/hooks";
import type { Job, LogEnd, LogStream, NodeInfo } from "../api/types";
import { FrameBatcher } from "../charts/batch";
import { Icon } from "../components/Icon";
import { JobActions } from "../components/JobActions";
import { LogView } from "../components/LogView";
import { jobToRequest, SubmitJobDialog } from "../components/SubmitJobDialog";
import { CopyId, Empty, ErrorBanner, KeyValues, LiveDot, Loading, PageHeader, Segmented, StatusBadge } from "../components/ui";
import { attemptDetail } from "../lib/attempts";
import { cleanLogLine, fmtDateTime, fmtDuration, shortId } from "../lib/format";
import { joinCommand } from "../lib/jobForm";
import { logSource, type LogSource } from "../lib/nodeLink";
import { Link, navigate, useUrlState } from "../router/router";
import { int, oneOf, str } from "../router/urlState";

const schema = { stream: oneOf(["stdout", "stderr"] as const, "stdout"), attempt: int(0, 0), q: str() };
const TAIL = 5000;
const MAX_LINES = 200_000;

export function JobDetail({ id }: { id: string }) {
  const [view, setView] = useUrlState(schema);
  const now = useNow(1000);
  const job = useResource((s) => api.getJob(id, s), [id], { live: ["jobs"], pollMs: 3000, keepPrevious: false });
  const nodes = useResource((s) => api.listNodes(s), [],
    { live: ["nodes"], pollMs: 5000, liveGapMs: 5000 }); // a remote node's link comes and goes; each snapshot is a change
  const [copy, setCopy] = useState(false);
  const j = job.data;

  if (job.error && !j) {
    return (
      <div className="page">
        <PageHeader title="Job" />
        {job.error.status === 404 ? <Empty title="No such job" icon="jobs">{id} is not known to this daemon. <Link to="/jobs">All jobs</Link></Empty>
          : <ErrorBanner error={job.error} onRetry={job.reload} />}
      </div>
    );
  }
  if (!j) return <div className="page"><Loading rows={8} /></div>;
  const attempt = view.attempt || j.attempt;

  return (
    <div className="page page-fill">
      <PageHeader
        title={<><span className="crumb"><Link to="/jobs">Jobs</Link><Icon name="chevronRight" size={14} /></span>{j.name}</>}
        sub={<><StatusBadge status={j.status} /> <CopyId id={j.id} />
          {j.failure_reason && <span className="text-bad" title={j.failure_message ?? undefined}> · {j.failure_reason}</span>}
          {j.failure_message && <span className="muted"> · {j.failure_message}</span>}
          {j.exit_code !== null && <span className="muted"> · exit {j.exit_code}</span>}</>}>
        {j.sweep_id && <Link className="btn" to={`/sweeps/${j.sweep_id}`}><Icon name="sweeps" size={14} />Sweep</Link>}
        {j.run_id && <Link className="btn" to={`/runs/${j.run_id}`}><Icon name="runs" size={14} />Run</Link>}
        <button className="btn" onClick={() => setCopy(true)}><Icon name="copy" size={14} />Submit a copy</button>
        <JobActions job={j} onChange={(next) => job.mutate(() => next)} />
      </PageHeader>
      <div className="job-detail">
        <section className="card job-info">
          <pre className="cmd-block mono" title="Command (argv, no shell)">{joinCommand(j.command)}</pre>
          <KeyValues items={[
            ["Working dir", <span className="mono">{j.cwd ?? "—"}</span>],
            ["Node", <JobNode job={j} nodes={nodes.data} />],
            ["GPUs", j.gpu_indexes.length ? <>{j.gpu_indexes.length} <span className="muted">(GPU <span className="mono">{j.gpu_indexes.join(", ")}</span>)</span></>
              : j.gpu ? `${j.gpu} requested` : "none (CPU slot)"],
            ["Type", j.type.toLowerCase()],
            ...queueItems(j),
            ["Attempt", attemptDetail(j)],
            ["Priority", String(j.priority)],
            ["Created", fmtDateTime(j.created_at)],
            ["Started", fmtDateTime(j.started_at)],
            ["Duration", j.started_at ? fmtDuration((j.finished_at ?? now) - j.started_at) : "—"],
            ["Timeout", j.timeout_s ? fmtDuration(j.timeout_s * 1000) : "none"],
            ...(j.labels.length ? [["Labels", j.labels.join(", ")] as [string, string]] : []),
            ...(Object.keys(j.env).length ? [["Env", <span className="mono env">{Object.entries(j.env).map(([k, v]) =>
              <span key={k}>{k}={v}</span>)}</span>] as [string, React.ReactNode]] : []),
          ]} />
        </section>
        <LogPanel job={j} stream={view.stream} attempt={attempt} latest={!view.attempt} filter={view.q}
          source={logSource(j, nodes.data)} setView={setView} onEnd={job.reload} />
      </div>
      {copy && <SubmitJobDialog nodes={nodes.data} initial={jobToRequest(j)} onClose={() => setCopy(false)}
        onSubmitted={(nj) => { setCopy(false); navigate(`/jobs/${nj.id}`); }} />}
    </div>
  );
}

/** Where the job stands in the queue: why it waits, its group, its sweep, the jobs it waits for
 * and those that wait for it (each a link, with its state). */
export function queueItems(j: Job): [string, React.ReactNode][] {
  const items: [string, React.ReactNode][] = [];
  const waiting = j.status === "QUEUED" || j.status === "CREATED" ? j.queue_reason : j.status === "DISPATCHING" ? j.wait_reason : null;
  if (waiting) items.push(["Waiting", <span className="text-warn" data-wait-reason>{waiting}</span>]);
  items.push(["Group", j.group ? <Link to={`/jobs?group=${encodeURIComponent(j.group)}`} data-group>{j.group}</Link>
    : <span className="muted">default</span>]);
  if (j.sweep_id) {
    items.push(["Sweep", <span data-sweep-link><Link to={`/sweeps/${j.sweep_id}`}>trial #{j.sweep_trial}</Link>
      {j.sweep_values && <span className="muted mono"> {Object.entries(j.sweep_values).map(([k, v]) => `${k}=${v}`).join(", ")}</span>}</span>]);
  }
  if (j.dependencies.length) {
    items.push([`Waits for${j.after ? ` (${j.after})` : ""}`, <JobLinks links={j.dependencies} kind="dependencies" />]);
  }
  if (j.dependants.length) items.push(["Dependants", <JobLinks links={j.dependants} kind="dependants" />]);
  return items;
}

function JobLinks({ links, kind }: { links: Job["dependencies"]; kind: string }) {
  return (
    <span className="job-links" data-links={kind}>
      {links.map((l) => (
        <span key={l.job_id}><Link to={`/jobs/${l.job_id}`} className="mono" data-job={l.job_id}>{shortId(l.job_id)}</Link>
          {" "}<StatusBadge status={l.status} /></span>
      ))}
    </span>
  );
}

/** The node the job runs or ran on, by name with a link to it; the one it asked for before it is placed. */
export function JobNode({ job, nodes }: { job: Pick<Job, "node" | "node_id">; nodes: NodeInfo[] | undefined }) {
  const node = job.node_id ? nodes?.find((n) => n.id === job.node_id) : undefined;
  if (node) return <Link to={`/nodes?node=${encodeURIComponent(node.name)}`}>{node.name}</Link>;
  if (job.node_id) {
    return <span className="mono" title={job.node_id}>{shortId(job.node_id)}{nodes && <span className="muted"> (forgotten)</span>}</span>;
  }
  return <>{job.node ? <>{job.node} <span className="muted">(asked for)</span></> : "any"}</>;
}

/** Live output, or only the stored tail because the job's remote node is offline. */
export function LogSourceBadge({ source }: { source: LogSource }) {
  return <span className={source.live ? "badge badge-ok" : "badge badge-warn"} data-log-source={source.live ? "live" : "tail"}
    title={source.live ? "From the node: the whole file, as it grows" : "Only the last lines the server keeps; the rest is on the node"}>
    {source.text}</span>;
}

function LogPanel({ job, stream, attempt, latest, filter, source, setView, onEnd }: {
  job: Job; stream: LogStream; attempt: number; latest: boolean; filter: string; source: LogSource | null;
  setView: (p: Partial<{ stream: LogStream; attempt: number; q: string }>) => void; onEnd: () => void }) {
  const lines = useRef<string[]>([]);
  const first = useRef(1);
  const [version, setVersion] = useState(0);
  const [follow, setFollow] = useState(true);
  const [position, setPosition] = useState<string | null | undefined>(undefined); // undefined: tail not loaded
  const [error, setError] = useState<Error | undefined>();
  const [ended, setEnded] = useState(false);
  const batcher = useMemo(() => new FrameBatcher<number>(() => setVersion((v) => v + 1)), []);
  useEffect(() => () => batcher.dispose(), [batcher]);
  const sessionKey = `${job.id}/${stream}/${attempt}`;

  // The last lines first (one request), then follow from the last offset.
  useEffect(() => {
    lines.current = [];
    first.current = 1;
    setVersion((v) => v + 1);
    setPosition(undefined);
    setEnded(false);
    setError(undefined);
    setFollow(true);
    if (attempt === 0) {
      setPosition(null);
      return;
    }
    const abort = new AbortController();
    api.jobLogs(job.id, { stream, tail: TAIL, attempt }, abort.signal).then((page) => {
      lines.current = page.lines.map((l) => cleanLogLine(l.line));
      setVersion((v) => v + 1);
      const last = page.lines[page.lines.length - 1];
      setPosition(last ? String(last.offset) : null);
    }, (e) => {
      if (e.name === "AbortError") return;
      setError(e);
      setPosition(null);
    });
    return () => abort.abort();
  }, [sessionKey]); // eslint-disable-line react-hooks/exhaustive-deps

  const live = position !== undefined && !ended;
  const sse = useEventStream(live ? `${sessionKey}@${position ?? "start"}` : null,
    live ? { path: `/jobs/${encodeURIComponent(job.id)}/logs/stream`, query: { stream, attempt: attempt || undefined,
      position: position ?? undefined } } : null,
    (m) => {
      if (m.event === stream) {
        const buf = lines.current;
        buf.push(cleanLogLine(m.data));
        if (buf.length > MAX_LINES) {
          const drop = buf.length - MAX_LINES + 10_000;
          buf.splice(0, drop);
          first.current += drop;
        }
        batcher.mark(0);
      } else if (m.event === "end") {
        setEnded(true);
        onEnd();
        const end = JSON.parse(m.data) as LogEnd;
        if (end.status === "RETRIED" && latest) setView({ attempt: 0 });
      }
    });

  const shown = useMemo(() => {
    if (!filter) return lines.current;
    const q = filter.toLowerCase();
    return lines.current.filter((l) => l.toLowerCase().includes(q));
  }, [filter, version]); // eslint-disable-line react-hooks/exhaustive-deps

  const attempts = Array.from({ length: job.attempt }, (_, i) => job.attempt - i);
  return (
    <section className="card log-card">
      <div className="log-toolbar">
        <Segmented label="Stream" value={stream} onChange={(s) => setView({ stream: s })}
          options={[{ id: "stdout", label: "stdout" }, { id: "stderr", label: "stderr" }]} />
        {attempts.length > 1 && (
          <select value={latest ? 0 : attempt} onChange={(e) => setView({ attempt: Number(e.target.value) })} aria-label="Attempt">
            <option value={0}>latest attempt ({job.attempt})</option>
            {attempts.map((a) => <option key={a} value={a}>attempt {a}</option>)}
          </select>
        )}
        <div className="search grow">
          <Icon name="search" size={14} />
          <input value={filter} onChange={(e) => setView({ q: e.target.value })} placeholder="Filter lines" aria-label="Filter lines" />
        </div>
        <span className="muted small">{filter ? `${shown.length} of ${lines.current.length}` : `${lines.current.length}`} lines</span>
        {source && <LogSourceBadge source={source} />}
        {ended ? <span className="live live-closed"><i />ended</span> :
          <LiveDot state={position === undefined ? "connecting" : sse.state} />}
        <button className={follow ? "btn btn-sm on" : "btn btn-sm"} onClick={() => setFollow(!follow)} aria-pressed={follow}
          title="Keep the newest line in view"><Icon name="arrowDown" size={13} />Follow</button>
      </div>
      <ErrorBanner error={error ?? sse.error} />
      <LogView lines={shown} version={version} firstLine={filter ? 1 : first.current} follow={follow}
        onFollowChange={setFollow} highlight={filter || undefined} className="log-main"
        empty={position === undefined ? null : (
          <Empty compact title={attempt === 0 ? "Waiting for the job to start" : filter ? "No line matches" : `No ${stream} output yet`}
            icon="jobs">
            {attempt === 0 ? "Output appears here as soon as the job runs." : null}
          </Empty>
        )} />
    </section>
  );
}
