// Nodes: every node with its state and heartbeat (and, for a remote agent's node, its link:
// attached or detached, last heartbeat, spool backlog, clock skew; for a Slurm node, its
// runner and job slots); the chosen one in detail: hardware, GPU slots with their owners and
// readings (or, on a Slurm node, its capacity), what each condition means, host resources,
// and its metric history.

import { api } from "../api/client";
import { useNow, useResource } from "../api/hooks";
import type { GpuReading, NodeInfo } from "../api/types";
import { SystemCharts } from "../charts/SystemCharts";
import { Ago, Empty, ErrorBanner, KeyValues, Loading, Meter, PageHeader, Segmented, StatusBadge } from "../components/ui";
import { fmtBytes, fmtMiB, fmtPct, fmtValue, lastSeen, pooledCapacity } from "../lib/format";
import { fmtBacklog, fmtSkew, hasRemote, linkState } from "../lib/nodeLink";
import { Link, useUrlState } from "../router/router";
import { oneOf, str } from "../router/urlState";

const RANGES = { "15m": 15 * 60_000, "1h": 3_600_000, "6h": 6 * 3_600_000, "24h": 86_400_000, "7d": 7 * 86_400_000 } as const;
type Range = keyof typeof RANGES;
const schema = { node: str(), range: oneOf(Object.keys(RANGES) as Range[], "1h") };

export function Nodes() {
  const [view, setView] = useUrlState(schema);
  const now = useNow(1000);
  const nodes = useResource((s) => api.listNodes(s), [], { live: ["nodes"], pollMs: 2000, liveGapMs: 2000 });
  const list = nodes.data ?? [];
  const selected = list.find((n) => n.name === view.node || n.id === view.node) ?? (list.length === 1 ? list[0] : undefined);

  return (
    <div className="page">
      <PageHeader title="Nodes" sub={nodes.data ? `${list.filter((n) => n.status === "ONLINE").length} of ${list.length} online` : undefined} />
      <ErrorBanner error={nodes.error} onRetry={nodes.reload} />
      {!nodes.data && !nodes.error && <Loading rows={4} />}
      {nodes.data && list.length === 0 && <Empty title="No nodes" icon="nodes">A node joins when a daemon with a node role connects.</Empty>}
      {list.length > 0 && <NodesTable nodes={list} selected={selected} now={now} onSelect={(n) => setView({ node: n.name })} />}
      {selected && <NodeDetail node={selected} range={view.range} setRange={(range) => setView({ range })} now={now} />}
    </div>
  );
}

/** Link state as a badge: attached (ok), detached (bad), local (muted). */
export function LinkBadge({ node }: { node: NodeInfo }) {
  const state = linkState(node);
  if (state === "local") return <span className="muted" title="The server's own node">local</span>;
  return <span className={`badge ${state === "attached" ? "badge-ok" : "badge-bad"}`} data-link={state}
    title={state === "attached" ? "Its agent is connected" : "Its agent is not connected: the node is offline"}>
    <i className="dot" />{state}</span>;
}

/** The nodes, one row each; Link, Heartbeat, Backlog and Skew only when a node is a remote agent's. */
export function NodesTable({ nodes, selected, now, onSelect }: { nodes: NodeInfo[]; selected?: NodeInfo; now: number;
  onSelect: (n: NodeInfo) => void }) {
  const links = hasRemote(nodes);
  const runners = nodes.some((n) => n.runner !== "local"); // a Runner column only then
  return (
    <div className="table-wrap">
      <table className="table">
        <thead><tr><th>Node</th><th>Status</th>
          {links && <><th>Link</th><th>Heartbeat</th><th className="num" title="The agent's spool not yet acknowledged">Backlog</th>
            <th className="num" title="The agent's clock minus the server's">Skew</th></>}
          {runners && <th>Runner</th>}
          <th className="num">GPUs busy</th><th className="num">CPU jobs</th>
          <th>CPU</th><th>Memory</th><th>Last seen</th><th>Backend</th><th>Labels</th></tr></thead>
        <tbody>
          {nodes.map((n) => {
            const host = n.snapshot?.host;
            const remote = linkState(n) !== "local";
            return (
              <tr key={n.id} data-node={n.name} className={n === selected ? "selected clickable" : "clickable"} onClick={() => onSelect(n)}>
                <td className="nowrap"><Link to={`/nodes?node=${encodeURIComponent(n.name)}`} className="strong">{n.name}</Link></td>
                <td><StatusBadge status={n.status} />{!n.accepting && <span className="badge badge-warn">not accepting</span>}</td>
                {links && <>
                  <td><LinkBadge node={n} /></td>
                  <td className="nowrap">{remote ? <Ago ts={n.link?.last_heartbeat_at ?? n.last_heartbeat_at} now={now} /> : "—"}</td>
                  <td className="num nowrap">{remote ? fmtBacklog(n.link) : "—"}</td>
                  <td className="num nowrap">{remote ? fmtSkew(n.link?.skew_ms) : "—"}</td>
                </>}
                {runners && <td>{n.runner}</td>}
                {n.pooled ? <>
                  {/* Slurm places each job's GPUs: the most a job may ask, and the job slots (CPU jobs count against them). */}
                  <td className="num nowrap" title="Slurm places each job's GPUs">up to {n.pooled.gpus_per_job} a job</td>
                  <td className="num nowrap" title="Its jobs in Slurm (queued there or running, CPU jobs too) of the most it holds at once">
                    {n.pooled.jobs_in_flight} / {n.pooled.max_jobs} jobs</td>
                </> : <>
                  <td className="num">{n.gpus.filter((g) => g.owner_job_id).length} / {n.gpus.length}</td>
                  <td className="num">{n.cpu_jobs} / {n.max_cpu_jobs}</td>
                </>}
                <td className="meter-cell"><Meter value={host?.cpu_percent} label="CPU" /><span>{fmtPct(host?.cpu_percent)}</span></td>
                <td className="meter-cell"><Meter value={host?.memory_used_mb} max={host?.memory_total_mb ?? 0} label="Memory" />
                  <span>{fmtMiB(host?.memory_used_mb)} / {fmtMiB(host?.memory_total_mb)}</span></td>
                <td><Ago ts={lastSeen(n)} now={now} /></td>
                <td>{n.gpu_backend}</td>
                <td>{n.labels.map((l) => <span key={l} className="tag">{l}</span>)}</td>
              </tr>
            );
          })}
        </tbody>
      </table>
    </div>
  );
}

/** The link's rows of a node's details: local, or the state, last heartbeat, backlog and skew. */
export function linkItems(node: NodeInfo, now: number): [string, React.ReactNode][] {
  if (linkState(node) === "local") return [["Link", <LinkBadge node={node} />]];
  const link = node.link;
  return [
    ["Link", <><LinkBadge node={node} />{!link && <span className="muted small"> not heard from since the server started</span>}</>],
    ["Last heartbeat", <Ago ts={link?.last_heartbeat_at ?? node.last_heartbeat_at} now={now} />],
    ["Backlog", <span title="The agent's spool not yet acknowledged, at its last heartbeat">{fmtBacklog(link)}</span>],
    ["Clock skew", <span title="The agent's clock minus the server's">{fmtSkew(link?.skew_ms)}</span>],
  ];
}

/** How the node runs jobs: nothing more for a local node; a Slurm node's runner and capacity. */
export function runnerItems(node: NodeInfo): [string, React.ReactNode][] {
  if (!node.pooled) return node.runner === "local" ? [] : [["Runner", node.runner]];
  return [["Runner", node.runner], ["Capacity", pooledCapacity(node.pooled)]];
}

/** Each condition that holds, with what it means where the node says (a Slurm controller that does not answer...). */
export function Conditions({ node }: { node: NodeInfo }) {
  return (
    <ul className="node-conditions">
      {node.conditions.map((c) => (
        <li key={c}><span className="text-warn">{c}</span>
          {node.condition_messages[c] && <span className="small">: {node.condition_messages[c]}</span>}</li>
      ))}
    </ul>
  );
}

function NodeDetail({ node, range, setRange, now }: { node: NodeInfo; range: Range; setRange: (r: Range) => void; now: number }) {
  const snap = node.snapshot;
  const host = snap?.host;
  const readings = new Map((snap?.gpus ?? []).map((g) => [g.index, g]));
  const hw = node.hardware;
  return (
    <div className="node-detail">
      <div className="details-grid">
        <section className="card">
          <header className="card-head"><h2>{node.name}</h2><StatusBadge status={node.status} /></header>
          <KeyValues items={[
            ["Id", <span className="mono small">{node.id}</span>],
            ["Hostname", String(hw.hostname ?? "—")],
            ["CPUs", String(hw.cpu_count ?? "—")],
            ["Memory", fmtMiB(typeof hw.memory_mb === "number" ? hw.memory_mb : null)],
            ["Platform", <span className="small">{String(hw.platform ?? "—")}</span>],
            ["GPU backend", `${node.gpu_backend}${node.gpu_backend_note ? ` (${node.gpu_backend_note})` : ""}`],
            ["Last seen", <Ago ts={lastSeen(node)} now={now} />],
            ["Connected", node.connected ? "yes" : "no"],
            ...linkItems(node, now),
            ...runnerItems(node),
            ...(node.conditions.length ? [["Conditions", <Conditions node={node} />] as [string, React.ReactNode]] : []),
          ]} />
        </section>
        <section className="card">
          <header className="card-head"><h2>Host</h2>{snap && <span className="muted small">sampled <Ago ts={snap.ts} now={now} /></span>}</header>
          {!host ? <Empty compact title="No host readings yet" icon="nodes" /> : (
            <KeyValues items={[
              ["CPU", <span className="meter-inline"><Meter value={host.cpu_percent} label="CPU" />{fmtPct(host.cpu_percent)}</span>],
              ["Load", `${fmtValue(host.load1)} · ${fmtValue(host.load5)} · ${fmtValue(host.load15)}`],
              ["Memory", <span className="meter-inline"><Meter value={host.memory_used_mb} max={host.memory_total_mb ?? 0} label="Memory" />
                {fmtMiB(host.memory_used_mb)} / {fmtMiB(host.memory_total_mb)}</span>],
              ["Swap", host.swap_total_mb ? `${fmtMiB(host.swap_used_mb)} / ${fmtMiB(host.swap_total_mb)}` : "none"],
              ...host.disks.map((d) => [`Disk ${d.label}`, <span className="meter-inline" title={d.path}>
                <Meter value={d.used_bytes} max={d.total_bytes ?? 0} label={`Disk ${d.label} used`} />{fmtBytes(d.free_bytes)} free of {fmtBytes(d.total_bytes)}</span>] as [string, React.ReactNode]),
            ]} />
          )}
        </section>
      </div>
      <section className="card">
        <header className="card-head"><h2>GPUs</h2><span className="muted small">{node.gpus.length} slot{node.gpus.length === 1 ? "" : "s"}</span></header>
        {node.gpus.length === 0 ? (node.pooled
          ? <Empty compact title="Placed by Slurm for each job" icon="gpu">Up to {node.pooled.gpus_per_job} GPUs a job; the job's own page shows which it got.</Empty>
          : <Empty compact title="No GPUs" icon="gpu">{node.gpu_backend_note ?? ""}</Empty>) : (
          <table className="table compact">
            <thead><tr><th>#</th><th>Model</th><th>Owner</th><th>Util</th><th>Memory</th><th className="num">Temp</th>
              <th className="num">Power</th><th className="num">SM clock</th><th className="num">Fan</th><th>Throttle</th><th className="num">ECC</th><th>Processes</th></tr></thead>
            <tbody>
              {node.gpus.map((slot) => {
                const g: GpuReading | undefined = readings.get(slot.index);
                return (
                  <tr key={slot.index} className={g?.error ? "row-bad" : undefined}>
                    <td className="mono">{slot.index}</td>
                    <td title={g?.uuid ?? undefined}>{slot.model ?? g?.model ?? "—"}</td>
                    <td>{slot.owner_job_id ? <Link to={`/jobs/${slot.owner_job_id}`}>{slot.owner_job_name ?? slot.owner_job_id}</Link>
                      : node.snapshot?.blocked_gpus.includes(slot.index) ? <span className="text-warn">blocked</span> : <span className="muted">free</span>}</td>
                    <td className="meter-cell"><Meter value={g?.utilization_pct} tone="run" label={`GPU ${slot.index} utilisation`} /><span>{fmtPct(g?.utilization_pct)}</span></td>
                    <td className="meter-cell"><Meter value={g?.memory_used_mb} max={g?.memory_total_mb ?? slot.memory_mb ?? 0} label={`GPU ${slot.index} memory`} />
                      <span>{fmtMiB(g?.memory_used_mb)} / {fmtMiB(g?.memory_total_mb ?? slot.memory_mb)}</span></td>
                    <td className="num">{g?.temperature_c == null ? "—" : `${Math.round(g.temperature_c)}°C`}</td>
                    <td className="num">{g?.power_w == null ? "—" : `${Math.round(g.power_w)}${g.power_limit_w ? ` / ${Math.round(g.power_limit_w)}` : ""} W`}</td>
                    <td className="num">{g?.sm_clock_mhz == null ? "—" : `${g.sm_clock_mhz} MHz`}</td>
                    <td className="num">{fmtPct(g?.fan_pct)}</td>
                    <td className="small">{g?.error ? <span className="text-bad">{g.error}</span> : (g?.throttle_reasons ?? []).join(", ")}</td>
                    <td className="num">{g?.ecc_errors ? `${g.ecc_errors.corrected ?? 0} / ${g.ecc_errors.uncorrected ?? 0}` : "—"}</td>
                    <td className="small">{(g?.processes ?? []).map((p) => (
                      <span key={p.pid} className={p.foreign ? "tag tag-warn" : "tag"} title={p.foreign ? "Not started by GPUPlane" : undefined}>
                        {p.pid}{p.gpu_memory_mb !== null ? ` · ${fmtMiB(p.gpu_memory_mb)}` : ""}</span>))}</td>
                  </tr>
                );
              })}
            </tbody>
          </table>
        )}
      </section>
      <section>
        <div className="toolbar">
          <h2 className="section-title">History</h2>
          <Segmented label="Window" value={range} onChange={setRange}
            options={(Object.keys(RANGES) as Range[]).map((r) => ({ id: r, label: r }))} />
        </div>
        <SystemCharts nodeId={node.id} span={{ window: range }} gpus={null} syncKey={`node-${node.id}`} />
      </section>
    </div>
  );
}
