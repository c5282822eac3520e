import { render } from "@testing-library/react";
import { describe, expect, it } from "vitest";
import type { NodeInfo, NodeLink } from "../api/types";
import { Conditions, linkItems, NodesTable, runnerItems } from "./Nodes";

const NOW = 1_800_000_000_000;

const node = (name: string, extra: Partial<NodeInfo> = {}): NodeInfo => ({
  id: `nd_${name}`, name, status: "ONLINE", connected: true, labels: [], gpu_backend: "fake", gpu_backend_note: null,
  max_cpu_jobs: 2, cpu_jobs: 0, gpus: [], last_heartbeat_at: NOW - 1000, hardware: {}, accepting: true, conditions: [],
  snapshot: null, drained: false, remote: false, link: null, runner: "local", pooled: null, condition_messages: {},
  ...extra });

const link = (extra: Partial<NodeLink> = {}): NodeLink => ({
  state: "attached", last_heard_at: NOW - 1000, last_heartbeat_at: NOW - 12_000, backlog_records: 0, backlog_bytes: 0,
  skew_ms: 12, ...extra });

function table(nodes: NodeInfo[]) {
  const { container } = render(<NodesTable nodes={nodes} now={NOW} onSelect={() => undefined} />);
  const heads = [...container.querySelectorAll("thead th")].map((th) => th.textContent);
  const rows = Object.fromEntries([...container.querySelectorAll("tbody tr")].map((tr) =>
    [tr.getAttribute("data-node"), Object.fromEntries([...tr.querySelectorAll("td")].map((td, i) => [heads[i], td]))]));
  return { heads, rows };
}

describe("NodesTable", () => {
  it("shows each remote node's link as a badge, its last heartbeat, backlog and skew; local for the server's own", () => {
    const { heads, rows } = table([
      node("box"),
      node("gpu1", { remote: true, link: link() }),
      node("gpu2", { remote: true, status: "OFFLINE", connected: false,
        link: link({ state: "detached", backlog_records: 1500, backlog_bytes: 3 * 1024 * 1024, skew_ms: -40 }) }),
    ]);
    expect(heads.slice(0, 6)).toEqual(["Node", "Status", "Link", "Heartbeat", "Backlog", "Skew"]);
    expect(rows.box.Link.textContent).toBe("local");
    expect(rows.box.Heartbeat.textContent).toBe("—");
    const attached = rows.gpu1.Link.querySelector(".badge");
    expect(attached?.getAttribute("data-link")).toBe("attached");
    expect(attached?.className).toContain("badge-ok");
    expect(rows.gpu1.Heartbeat.textContent).toBe("12s ago");
    expect([rows.gpu1.Backlog.textContent, rows.gpu1.Skew.textContent]).toEqual(["0", "+12 ms"]);
    const detached = rows.gpu2.Link.querySelector(".badge");
    expect([detached?.textContent, detached?.className]).toEqual(["detached", "badge badge-bad"]);
    expect([rows.gpu2.Backlog.textContent, rows.gpu2.Skew.textContent]).toEqual(["1,500 · 3.0 MiB", "−40 ms"]);
  });

  it("leaves the link columns out while every node is local", () => {
    const { heads } = table([node("box")]);
    expect(heads).not.toContain("Link");
    expect(heads.slice(0, 3)).toEqual(["Node", "Status", "GPUs busy"]);
  });
});

describe("a node's link details", () => {
  const text = (items: ReturnType<typeof linkItems>) => items.map(([k, v]) => {
    const { container } = render(<>{v}</>);
    return `${k}: ${container.textContent}`;
  });

  it("are the state, last heartbeat, backlog and clock skew of a remote node", () => {
    expect(text(linkItems(node("gpu1", { remote: true, link: link() }), NOW))).toEqual(
      ["Link: attached", "Last heartbeat: 12s ago", "Backlog: 0", "Clock skew: +12 ms"]);
    expect(text(linkItems(node("gpu3", { remote: true, link: null }), NOW))[0]).toBe(
      "Link: detached not heard from since the server started");
    expect(text(linkItems(node("box"), NOW))).toEqual(["Link: local"]);
  });
});

describe("a Slurm node", () => {
  const slurm = node("cluster", { runner: "slurm", gpu_backend: "slurm", max_cpu_jobs: 0,
    pooled: { gpus_per_job: 4, max_jobs: 8, jobs_in_flight: 3 }, conditions: ["slurm_unreachable"],
    condition_messages: { slurm_unreachable: "slurmctld did not answer squeue within 10 s" } });

  it("shows its runner and job slots in the list, not 0 of 0 GPUs", () => {
    const { heads, rows } = table([node("box"), slurm]);
    expect(heads).toContain("Runner");
    expect([rows.cluster.Runner.textContent, rows.box.Runner.textContent]).toEqual(["slurm", "local"]);
    expect(rows.cluster["GPUs busy"].textContent).toBe("up to 4 a job");
    expect(rows.cluster["CPU jobs"].textContent).toBe("3 / 8 jobs");
    expect(rows.box["GPUs busy"].textContent).toBe("0 / 0");
    expect(table([node("box")]).heads).not.toContain("Runner"); // all local: no column
  });

  it("details its capacity and what each condition means", () => {
    expect(runnerItems(slurm)).toEqual([["Runner", "slurm"],
      ["Capacity", "up to 4 GPUs a job, 8 jobs at once, 3 in flight"]]);
    expect(runnerItems(node("box"))).toEqual([]);
    const { container } = render(<Conditions node={slurm} />);
    expect(container.textContent).toBe("slurm_unreachable: slurmctld did not answer squeue within 10 s");
  });
});
