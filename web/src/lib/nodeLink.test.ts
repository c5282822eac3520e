import { describe, expect, it } from "vitest";
import type { JobState, NodeInfo, NodeLink } from "../api/types";
import { eventNodeName, fmtBacklog, fmtSkew, hasRemote, linkState, logSource } from "./nodeLink";

const link = (state: NodeLink["state"], extra: Partial<NodeLink> = {}): NodeLink => ({
  state, last_heard_at: 1, last_heartbeat_at: 1, backlog_records: 0, backlog_bytes: 0, skew_ms: 0, ...extra });

const node = (id: string, remote: boolean, l: NodeLink | null) => ({ id, name: `n-${id}`, remote, link: l }) as NodeInfo;

describe("a node's link", () => {
  it("is local for the server's own node, else the link's state; a remote node not heard from is detached", () => {
    expect(linkState({ remote: false, link: null })).toBe("local");
    expect(linkState({ link: null } as NodeInfo)).toBe("local");  // a server from before remote agents
    expect(linkState({ remote: true, link: link("attached") })).toBe("attached");
    expect(linkState({ remote: true, link: link("detached") })).toBe("detached");
    expect(linkState({ remote: true, link: null })).toBe("detached");
    expect(hasRemote([{ remote: false, link: null }])).toBe(false);
    expect(hasRemote([{ remote: false, link: null }, { remote: true, link: null }])).toBe(true);
  });

  it("writes the backlog and the skew", () => {
    expect(fmtBacklog(null)).toBe("—");
    expect(fmtBacklog(link("attached", { backlog_records: null, backlog_bytes: null }))).toBe("—");
    expect(fmtBacklog(link("attached"))).toBe("0");
    expect(fmtBacklog(link("detached", { backlog_records: 12345, backlog_bytes: 2048 }))).toBe("12,345 · 2.0 KiB");
    expect([null, 0, 12, -3, 9999, 42_400, -61_700].map(fmtSkew)).toEqual(["—", "+0 ms", "+12 ms", "−3 ms", "+9999 ms", "+42 s", "−62 s"]);
  });
});

describe("a job's log source", () => {
  const nodes = [node("a", false, null), node("b", true, link("attached")), node("c", true, link("detached")), node("d", true, null)];
  const job = (node_id: string | null, status: JobState = "RUNNING") => ({ node_id, status });

  it("is live on the server's own node and on an attached one", () => {
    expect(logSource(job("a"), nodes)).toEqual({ live: true, text: "live" });
    expect(logSource(job("b"), nodes)).toEqual({ live: true, text: "live" });
    expect(logSource(job("b", "SUCCEEDED"), nodes)).toEqual({ live: true, text: "full log" });
  });

  it("is the tail only while the job's remote node is offline", () => {
    expect(logSource(job("c"), nodes)).toEqual({ live: false, text: "tail only: node n-c is offline" });
    expect(logSource(job("d", "LOST"), nodes)).toEqual({ live: false, text: "tail only: node n-d is offline" });
    expect(logSource(job("gone"), nodes)?.live).toBe(false);
  });

  it("says nothing before the job has a node or the nodes are loaded", () => {
    expect(logSource(job(null, "QUEUED"), nodes)).toBeNull();
    expect(logSource(job("a"), undefined)).toBeNull();
  });
});

describe("an event's node", () => {
  const names = new Map([["nd_1", "gpu-a"]]);
  it("is named by the nodes listed, else by the name kept when it was forgotten", () => {
    expect(eventNodeName({ node_id: "nd_1", context: { node_name: "old" } }, names)).toBe("gpu-a");
    expect(eventNodeName({ node_id: "nd_2", context: { node_name: "gpu-b", jobs: [] } }, names)).toBe("gpu-b");
  });
  it("has no name when neither says, or no node", () => {
    expect(eventNodeName({ node_id: "nd_2", context: {} }, names)).toBeNull();
    expect(eventNodeName({ node_id: "nd_2", context: { node_name: 3 } }, names)).toBeNull();
    expect(eventNodeName({ node_id: null, context: { node_name: "x" } }, names)).toBeNull();
  });
});
