// A node's link to the server (issue 18): a remote agent's node is attached or detached, the
// server's own node is local; and what that means for a job's logs there: live while the
// node is reachable, otherwise only the tail the server keeps.

import type { Job, NodeInfo, NodeLink } from "../api/types";
import { fmtBytes } from "./format";
import { ENDED } from "./jobStates";

export type LinkState = "local" | "attached" | "detached";

/** "local" for the server's own node; a remote node the server has not heard from since it started is "detached". */
export function linkState(node: Pick<NodeInfo, "remote" | "link">): LinkState {
  if (node.link) return node.link.state;
  return node.remote ? "detached" : "local";
}

/** Whether any node is a remote agent's: only then are link columns worth their width. */
export function hasRemote(nodes: Pick<NodeInfo, "remote" | "link">[]): boolean {
  return nodes.some((n) => linkState(n) !== "local");
}

/** "0", "1,234 · 96.4 KiB"; "—" before the agent's first heartbeat. */
export function fmtBacklog(link: NodeLink | null | undefined): string {
  if (!link || link.backlog_records === null) return "—";
  if (!link.backlog_records && !link.backlog_bytes) return "0";
  return `${link.backlog_records.toLocaleString("en-US")} · ${fmtBytes(link.backlog_bytes)}`;
}

/** The agent's clock minus the server's: "+12 ms", "−3 ms", "+42 s"; "—" when not known. */
export function fmtSkew(ms: number | null | undefined): string {
  if (ms === null || ms === undefined) return "—";
  const sign = ms < 0 ? "−" : "+";
  const abs = Math.abs(ms);
  return abs < 10_000 ? `${sign}${abs} ms` : `${sign}${Math.round(abs / 1000)} s`;
}

export interface LogSource {
  live: boolean;
  text: string;
}

/** Where a job's logs come from. Live (the node's whole file, followed as it grows; "full log"
 * once the job ended) when the job's node is the server's own or its link is attached;
 * otherwise only the tail the server keeps. null before the job has a node, or while the
 * nodes are not loaded. */
export function logSource(job: Pick<Job, "node_id" | "status">, nodes: NodeInfo[] | undefined): LogSource | null {
  if (!job.node_id || !nodes) return null;
  const node = nodes.find((n) => n.id === job.node_id);
  if (!node) return { live: false, text: "tail only: its node is no longer known" };
  if (linkState(node) === "detached") return { live: false, text: `tail only: node ${node.name} is offline` };
  return { live: true, text: ENDED.has(job.status) ? "full log" : "live" };
}

/** The name of an event's node: from the nodes the server lists, else, for a node since
 * forgotten (`node forget`), the name the server kept in the event's context; null when
 * neither says (a forgotten node from before that was kept). */
export function eventNodeName(event: { node_id: string | null; context?: Record<string, unknown> | null },
  names: ReadonlyMap<string, string>): string | null {
  if (!event.node_id) return null;
  const listed = names.get(event.node_id);
  if (listed) return listed;
  const kept = event.context?.node_name;
  return typeof kept === "string" && kept ? kept : null;
}
