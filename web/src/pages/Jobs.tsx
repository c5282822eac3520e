// Jobs: status tabs, a dense table, cancel and retry with confirmation, and the submit
// dialog (form or TOML). The tab, the text filter and the page size live in the URL.

import { useMemo, useState } from "react";
import { api } from "../api/client";
import { useNow, useResource } from "../api/hooks";
import type { Job } from "../api/types";
import { Icon } from "../components/Icon";
import { JobActions } from "../components/JobActions";
import { GroupsBar, PriorityCell } from "../components/JobQueueControls";
import { SubmitJobDialog } from "../components/SubmitJobDialog";
import { Ago, CopyId, Empty, ErrorBanner, Loading, PageHeader, StatusBadge, Tabs } from "../components/ui";
import { attemptText } from "../lib/attempts";
import { fmtDuration } from "../lib/format";
import { joinCommand } from "../lib/jobForm";
import { WAITING, WENT_WRONG } from "../lib/jobStates";
import { Link, navigate, useUrlState } from "../router/router";
import { bool, int, oneOf, str } from "../router/urlState";

const TABS = ["all", "queued", "running", "succeeded", "failed", "cancelled"] as const;
type Tab = (typeof TABS)[number];
const STATES: Record<Tab, string[]> = {
  all: [], queued: [...WAITING, "DISPATCHING"], running: ["RUNNING"], succeeded: ["SUCCEEDED"],
  failed: [...WENT_WRONG], cancelled: ["CANCELLED"],
};
const schema = { tab: oneOf(TABS, "all"), q: str(), n: int(100, 1, 10_000), submit: bool(false), group: str() };

export function Jobs() {
  const [view, setView] = useUrlState(schema);
  const now = useNow(1000);
  const jobs = useResource((s) => api.listJobs({ status: STATES[view.tab], group: view.group || undefined, limit: view.n }, s),
    [view.tab, view.n, view.group], { live: ["jobs"], pollMs: 3000, keepPrevious: false });
  const groups = useResource((s) => api.listGroups(s), [], { live: ["groups", "jobs"], pollMs: 3000 });
  const active = useResource((s) => api.listJobs({ status: [...STATES.queued, ...STATES.running], limit: 1000 }, s), [],
    { live: ["jobs"], pollMs: 3000 });
  const nodes = useResource((s) => api.listNodes(s), []);
  const [changed, setChanged] = useState<Map<string, Job>>(new Map());

  const counts = useMemo(() => {
    const list = active.data?.jobs ?? [];
    return {
      queued: list.filter((j) => STATES.queued.includes(j.status)).length,
      running: list.filter((j) => j.status === "RUNNING").length,
    };
  }, [active.data]);

  const rows = useMemo(() => {
    const q = view.q.trim().toLowerCase();
    const list = (jobs.data?.jobs ?? []).map((j) => changed.get(j.id) ?? j);
    if (!q) return list;
    return list.filter((j) => j.name.toLowerCase().includes(q) || j.id.toLowerCase().includes(q) ||
      j.command.join(" ").toLowerCase().includes(q) || (j.node ?? "").toLowerCase().includes(q));
  }, [jobs.data, view.q, changed]);

  const onChange = (job: Job) => {
    setChanged((m) => new Map(m).set(job.id, job));
    jobs.reload();
    active.reload();
    groups.reload();
  };

  return (
    <div className="page">
      <PageHeader title="Jobs">
        <button className="btn btn-primary" onClick={() => setView({ submit: true }, { push: true })}>
          <Icon name="plus" size={14} />Submit job
        </button>
      </PageHeader>
      <div className="toolbar">
        <Tabs value={view.tab} onChange={(tab) => setView({ tab, n: 100 }, { push: true })} items={[
          { id: "all", label: "All" }, { id: "queued", label: "Queued", count: counts.queued },
          { id: "running", label: "Running", count: counts.running }, { id: "succeeded", label: "Succeeded" },
          { id: "failed", label: "Failed" }, { id: "cancelled", label: "Cancelled" },
        ]} />
        <div className="search">
          <Icon name="search" size={14} />
          <input value={view.q} onChange={(e) => setView({ q: e.target.value })} placeholder="Filter by name, command, node"
            aria-label="Filter jobs" />
        </div>
      </div>
      <GroupsBar groups={groups.data?.groups ?? []} selected={view.group} onSelect={(group) => setView({ group, n: 100 }, { push: true })}
        onChanged={() => { groups.reload(); jobs.reload(); }} />
      {groups.data?.queue_paused && <div className="banner banner-warn"><Icon name="alert" /><span>The whole queue is paused: no queued job starts (<code>gpuplanectl queue resume</code>).</span></div>}
      <ErrorBanner error={jobs.error} onRetry={jobs.reload} />
      {!jobs.data && !jobs.error ? <Loading rows={8} /> : rows.length === 0 ? (
        <Empty title={view.q ? "No job matches the filter" : view.group ? `No ${view.tab === "all" ? "" : `${view.tab} `}jobs in group ${view.group}`
          : view.tab === "all" ? "No jobs yet" : `No ${view.tab} jobs`} icon="jobs">
          {view.tab === "all" && !view.q && !view.group ? <>Queue one with <b>Submit job</b>, or from a shell: <code>gpuplanectl job submit -- python train.py</code></> : null}
        </Empty>
      ) : (
        <div className="table-wrap">
          <table className="table fit jobs-table">
            <thead>
              <tr>
                <th className="w-status">Status</th><th className="w-name">Name</th><th>Command</th><th className="num w-s">GPUs</th>
                <th className="w-m">Node</th><th className="num w-s col-wide">Attempt</th><th className="num w-xs">Prio</th>
                <th className="w-m">Created</th><th className="num w-s">Duration</th><th className="actions-col w-actions" />
              </tr>
            </thead>
            <tbody>
              {rows.map((j) => (
                <tr key={j.id} className="clickable" onClick={(e) => {
                  if ((e.target as HTMLElement).closest("a,button")) return;
                  navigate(`/jobs/${j.id}`);
                }}>
                  <td><StatusBadge status={j.status} /></td>
                  <td>
                    <div className="clip" title={j.name}><Link to={`/jobs/${j.id}`} className="strong">{j.name}</Link></div>
                    <div className="sub"><CopyId id={j.id} />{j.type !== "TRAIN" && <span className="muted"> · {j.type.toLowerCase()}</span>}</div>
                  </td>
                  <td className="mono cmd" title={joinCommand(j.command)}>{joinCommand(j.command)}</td>
                  <td className="num mono" title={j.gpu_indexes.length ? `GPU ${j.gpu_indexes.join(", ")}` : j.gpu ? `${j.gpu} requested` : "CPU only"}>
                    {gpusCell(j)}</td>
                  <td>{j.node_id ? <span title={j.node_id}>{nodeName(nodes.data, j.node_id)}</span> : j.node ? <span title={j.node}>{j.node}</span> : <span className="muted">any</span>}</td>
                  <td className="num col-wide">{attemptText(j)}</td>
                  <td className="num"><PriorityCell job={j} onChange={onChange} /></td>
                  <td><Ago ts={j.created_at} now={now} /></td>
                  <td className="num">{j.started_at ? fmtDuration((j.finished_at ?? now) - j.started_at) : ""}</td>
                  <td className="actions-col"><JobActions job={j} onChange={onChange} compact /></td>
                </tr>
              ))}
            </tbody>
          </table>
          {jobs.data?.next_cursor && !view.q && (
            <div className="table-more"><button className="btn btn-sm" onClick={() => setView({ n: view.n + 100 })}>Show 100 more</button></div>
          )}
        </div>
      )}
      {view.submit && (
        <SubmitJobDialog nodes={nodes.data} onClose={() => setView({ submit: false })}
          onSubmitted={(job) => navigate(`/jobs/${job.id}`)} />
      )}
    </div>
  );
}

/** "1 · #0" (how many, which), "2" while queued, "CPU" for a job that takes no GPU. */
export function gpusCell(j: Pick<Job, "gpu" | "gpu_indexes">): string {
  if (j.gpu_indexes.length) return `${j.gpu_indexes.length} · #${j.gpu_indexes.join(",")}`;
  return j.gpu ? String(j.gpu) : "CPU";
}

export function nodeName(nodes: { id: string; name: string }[] | undefined, id: string | null): string {
  if (!id) return "";
  return nodes?.find((n) => n.id === id)?.name ?? id;
}
