import { render } from "@testing-library/react";
import { describe, expect, it } from "vitest";
import type { JobState, NodeInfo } from "../api/types";
import { logSource } from "../lib/nodeLink";
import { JobNode, LogSourceBadge } from "./JobDetail";

const nodes = [
  { id: "nd_1", name: "box", remote: false, link: null },
  { id: "nd_2", name: "gpu-a", remote: true, link: { state: "detached", last_heard_at: 1, last_heartbeat_at: 1,
    backlog_records: 0, backlog_bytes: 0, skew_ms: 0 } },
] as NodeInfo[];

describe("the job page's node", () => {
  it("is the node's name, linking to it, not its id", () => {
    const { container } = render(<JobNode job={{ node: null, node_id: "nd_2" }} nodes={nodes} />);
    const link = container.querySelector("a");
    expect(link?.textContent).toBe("gpu-a");
    expect(link?.getAttribute("href")).toBe("/nodes?node=gpu-a");
  });

  it("is the id while the nodes load, the node asked for before placement, or any", () => {
    expect(render(<JobNode job={{ node: null, node_id: "nd_01ABCDEFGHJK" }} nodes={undefined} />).container.textContent)
      .toBe("nd_…EFGHJK");
    expect(render(<JobNode job={{ node: null, node_id: "nd_01ABCDEFGHJK" }} nodes={nodes} />).container.textContent)
      .toContain("(forgotten)");
    expect(render(<JobNode job={{ node: "gpu-a", node_id: null }} nodes={nodes} />).container.textContent).toBe("gpu-a (asked for)");
    expect(render(<JobNode job={{ node: null, node_id: null }} nodes={nodes} />).container.textContent).toBe("any");
  });
});

describe("the job page's log source", () => {
  const badge = (node_id: string, status: JobState = "RUNNING") => {
    const source = logSource({ node_id, status }, nodes);
    return render(source ? <LogSourceBadge source={source} /> : <></>).container.querySelector("[data-log-source]");
  };

  it("says live for the server's own node, tail only while a remote node is offline", () => {
    expect([badge("nd_1")?.textContent, badge("nd_1")?.getAttribute("data-log-source")]).toEqual(["live", "live"]);
    const tail = badge("nd_2", "LOST");
    expect([tail?.textContent, tail?.getAttribute("data-log-source")]).toEqual(["tail only: node gpu-a is offline", "tail"]);
  });
});
