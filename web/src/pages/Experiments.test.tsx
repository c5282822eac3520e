import { act, fireEvent, render, screen, waitFor } from "@testing-library/react";
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { ShortLink } from "../experiments/ShortLink";
import { SavedViews, SHORT_LINK_OVER, ShareButton } from "../experiments/ShareViews";
import { wsMetric, wsRun } from "../experiments/testRuns";
import type { WorkspaceReply } from "../experiments/types";
import { recordCanvas } from "../experiments/viz/testCanvas";
import { Experiments } from "./Experiments";

// A loaded machine (the suite runs beside builds) can take more than waitFor's default second.
const SLOW = { timeout: 5000 };

function json(status: number, body: unknown) {
  return new Response(JSON.stringify(body), { status, headers: { "Content-Type": "application/json" } });
}

const REPLY: WorkspaceReply = {
  runs: [
    wsRun("run_a", { name: "alpha", status: "RUNNING", config: { lr: 0.1, opt: "adam" }, metrics: { loss: wsMetric([9, 0.5], [5, 0.2], [0, 2]) } }),
    wsRun("run_b", { name: "beta", config: { lr: null, opt: "sgd" }, metrics: { loss: wsMetric([9, 0.9], [5, 0.7], [0, 2]) } }),
    wsRun("run_c", { name: "gamma", status: "FAILED", config: { lr: 0.01, opt: "adam" }, metrics: {} }),
  ],
  metrics: [], config_keys: [{ key: "lr", types: ["number", "null"] }, { key: "opt", types: ["string"] }],
  primary_metric: null, truncated: false,
};

describe("the Experiments page", () => {
  let fetchMock: ReturnType<typeof vi.fn>;
  const calls = (path: string) => fetchMock.mock.calls.filter(([url]) => String(url).startsWith(`/api/v1${path}`));
  const serve = async (url: string, _init?: RequestInit) => {
    if (url.startsWith("/api/v1/workspace/runs")) return json(200, REPLY);
    if (url.startsWith("/api/v1/sweeps")) return json(200, { sweeps: [] });
    return json(404, { error: { code: "not_found", message: `no such endpoint: ${url}` } });
  };
  beforeEach(() => {
    fetchMock = vi.fn(serve);
    vi.stubGlobal("fetch", fetchMock);
  });
  afterEach(() => {
    vi.unstubAllGlobals();
    window.history.replaceState(null, "", "/");
  });

  const runIds = () => [...document.querySelectorAll<HTMLTableRowElement>("tbody tr[data-run]")].map((tr) => tr.dataset.run);

  it("loads the URL's selection in one request and shows the view the URL names: filters, sort, hidden columns", async () => {
    window.history.replaceState(null, "", "/experiments?p=vision,nlp&f=c.opt=adam&sort=-c.lr&hide=tags,created");
    render(<Experiments />);
    await waitFor(() => expect(runIds()).toEqual(["run_a", "run_c"]), SLOW);
    expect(calls("/workspace/runs")).toHaveLength(1);
    const [, init] = calls("/workspace/runs")[0];
    expect(JSON.parse(init.body)).toEqual({ projects: ["vision", "nlp"], experiments: [], sweep: null, limit: 1000 });
    const heads = [...document.querySelectorAll("thead .exp-col-label")].map((e) => e.textContent);
    expect(heads).toEqual(["Status", "Name", "lr", "opt"]);
    expect(screen.getByText("opt ∈ {adam}")).toBeTruthy();
  });

  it("writes each change into the address: sort, diff-only, group, a removed filter", async () => {
    window.history.replaceState(null, "", "/experiments?p=vision&f=c.opt=adam");
    render(<Experiments />);
    await waitFor(() => expect(runIds()).toEqual(["run_a", "run_c"]), SLOW);
    fireEvent.click(screen.getByTitle("Sort by lr"));
    expect(new URLSearchParams(window.location.search).get("sort")).toBe("c.lr");
    await waitFor(() => expect(runIds()).toEqual(["run_c", "run_a"]), SLOW);
    fireEvent.click(screen.getByRole("button", { name: "Diff only" }));
    expect(new URLSearchParams(window.location.search).get("diff")).toBe("1");
    // Among the adam runs only lr differs: opt drops out of the table.
    await waitFor(() => expect([...document.querySelectorAll("thead .exp-col-label")].map((e) => e.textContent))
      .not.toContain("opt"), SLOW);
    fireEvent.change(screen.getByLabelText("Group by"), { target: { value: "status" } });
    expect(new URLSearchParams(window.location.search).get("g")).toBe("status");
    fireEvent.click(screen.getByLabelText("Remove the filter on opt"));
    expect(new URLSearchParams(window.location.search).get("f")).toBeNull();
    await waitFor(() => expect(runIds()).toHaveLength(3), SLOW);
  });

  it("for a sweep, a brush filters the table and keeps the axis it is on, though its key no longer varies in what it leaves", async () => {
    const canvas = recordCanvas();
    try {
      window.history.replaceState(null, "", "/experiments?sweep=swp_1&b=c.opt=adam");
      render(<Experiments />);
      await waitFor(() => expect(runIds()).toEqual(["run_a", "run_c"]), SLOW);
      expect(JSON.parse(calls("/workspace/runs")[0][1].body)).toMatchObject({ projects: [], experiments: [], sweep: "swp_1" });
      const pc = screen.getByRole("img", { name: /^Parallel coordinates/ });
      expect(pc.getAttribute("aria-label")).toBe("Parallel coordinates: 3 runs over lr, opt");
      expect(screen.getByRole("button", { name: /brushed: 2 of 3/ })).toBeTruthy();
    } finally {
      canvas.uninstall();
    }
  });

  it("clearing every brush at once (the chart calls once per brush, in one tick) clears them all", async () => {
    const canvas = recordCanvas();
    try {
      window.history.replaceState(null, "", "/experiments?sweep=swp_1&b=c.opt=adam,c.lr:0.001..0.2");
      render(<Experiments />);
      await waitFor(() => expect(runIds()).toEqual(["run_a", "run_c"]), SLOW);
      fireEvent.click(screen.getByRole("button", { name: "Clear brushes" }));
      expect(new URLSearchParams(window.location.search).get("b")).toBeNull();
      await waitFor(() => expect(runIds()).toHaveLength(3), SLOW);
    } finally {
      canvas.uninstall();
    }
  });

  it("follows its running runs by push: an event about one of them reloads the table, another run's does not", async () => {
    let push: (text: string) => void = () => undefined;
    fetchMock.mockImplementation(async (url: string, init: RequestInit) => {
      if (!url.startsWith("/api/v1/events/stream")) return serve(url);
      const body = new ReadableStream<Uint8Array>({
        start(c) {
          push = (text) => c.enqueue(new TextEncoder().encode(text));
          init.signal?.addEventListener("abort", () => c.error(new DOMException("aborted", "AbortError")));
        },
      });
      return new Response(body, { status: 200, headers: { "Content-Type": "text/event-stream" } });
    });
    const event = (id: string, type: string, run: string) => `id: ${id}\nevent: event\ndata: ${JSON.stringify({ id, ts: 1, type,
      severity: "info", node_id: null, job_id: null, run_id: run, step: null, message: null, context: {} })}\n\n`;
    window.history.replaceState(null, "", "/experiments?p=vision");
    render(<Experiments />);
    await waitFor(() => expect(runIds()).toHaveLength(3), SLOW);
    await waitFor(() => expect(calls("/events/stream")).toHaveLength(1), SLOW);
    push(event("ev_1", "CHECKPOINT_SAVED", "run_elsewhere"));
    await act(async () => { await new Promise((r) => setTimeout(r, 20)); });
    expect(calls("/workspace/runs")).toHaveLength(1);
    push(event("ev_2", "RUN_FINISHED", "run_a"));
    await waitFor(() => expect(calls("/workspace/runs")).toHaveLength(2), SLOW);
  });

  it("follows nothing while none of its runs is running", async () => {
    const done = { ...REPLY, runs: REPLY.runs.map((r) => ({ ...r, status: "SUCCEEDED" })) };
    fetchMock.mockImplementation(async (url: string) => (url.startsWith("/api/v1/workspace/runs") ? json(200, done) : serve(url)));
    window.history.replaceState(null, "", "/experiments?p=vision");
    render(<Experiments />);
    await waitFor(() => expect(runIds()).toHaveLength(3), SLOW);
    await act(async () => { await new Promise((r) => setTimeout(r, 20)); });
    expect(calls("/events/stream")).toHaveLength(0);
  });

  it("asks to pick something, and loads nothing, while the URL selects nothing", async () => {
    window.history.replaceState(null, "", "/experiments");
    render(<Experiments />);
    expect(screen.getByText("Pick what to study")).toBeTruthy();
    await act(async () => undefined);
    expect(calls("/workspace/runs")).toHaveLength(0);
  });
});

describe("short links", () => {
  let fetchMock: ReturnType<typeof vi.fn>;
  beforeEach(() => {
    fetchMock = vi.fn();
    vi.stubGlobal("fetch", fetchMock);
  });
  afterEach(() => {
    vi.unstubAllGlobals();
    window.history.replaceState(null, "", "/");
  });

  it("/v/<id> loads the view and replaces the address with the full state", async () => {
    window.history.pushState(null, "", "/v/Ab3dEf9x");
    const before = window.history.length;
    fetchMock.mockResolvedValue(json(200, { view: { id: "Ab3dEf9x", state: "sweep=swp_1&g=c.opt", name: null, page: "experiments",
      created_at: 1 } }));
    render(<ShortLink id="Ab3dEf9x" />);
    await waitFor(() => expect(window.location.pathname).toBe("/experiments"), SLOW);
    expect(window.location.search).toBe("?sweep=swp_1&g=c.opt");
    expect(window.history.length).toBe(before);
    expect(String(fetchMock.mock.calls[0][0])).toBe("/api/v1/views/Ab3dEf9x");
  });

  it("says so when the view is not kept", async () => {
    fetchMock.mockResolvedValue(json(404, { error: { code: "not_found", message: "no view Ab3dEf9x" } }));
    render(<ShortLink id="Ab3dEf9x" />);
    await screen.findByText("No such view", undefined, SLOW);
  });

  it("Share copies the address while the state is short, and a server-kept short link once it is long", async () => {
    const writeText = vi.fn(async () => undefined);
    Object.defineProperty(navigator, "clipboard", { value: { writeText }, configurable: true });
    window.history.replaceState(null, "", "/experiments?p=vision");
    render(<ShareButton />);
    fireEvent.click(screen.getByRole("button", { name: "Share" }));
    await waitFor(() => expect(writeText).toHaveBeenCalledWith(`${window.location.origin}/experiments?p=vision`), SLOW);
    expect(fetchMock).not.toHaveBeenCalled();

    const long = `p=${"x".repeat(SHORT_LINK_OVER)}`;
    window.history.replaceState(null, "", `/experiments?${long}`);
    fetchMock.mockResolvedValue(json(200, { view: { id: "Zz9yXw8v", state: long, name: null, page: "experiments", created_at: 1 } }));
    fireEvent.click(screen.getByRole("button", { name: "Share" }));
    await waitFor(() => expect(writeText).toHaveBeenLastCalledWith(`${window.location.origin}/v/Zz9yXw8v`), SLOW);
    const [url, init] = fetchMock.mock.calls[0];
    expect([url, init.method, JSON.parse(init.body)]).toEqual(["/api/v1/views", "POST", { state: long, page: "experiments" }]);
    expect(screen.getByRole("status").textContent).toContain("Copied short link");
  });

  it("saved views: named from the current state, listed, loaded into the address, deleted only after a confirmation", async () => {
    const kept = { id: "v1", name: "best lr", state: "sweep=swp_1&g=c.lr", page: "experiments", created_at: 1 };
    fetchMock.mockImplementation(async (_url: string, init: RequestInit) => {
      if (init.method === "POST") return json(200, { view: { ...kept, id: "v2", ...JSON.parse(String(init.body)) } });
      if (init.method === "DELETE") return json(200, { view: kept });
      return json(200, { views: [kept] });
    });
    window.history.replaceState(null, "", "/experiments?p=vision&diff=1");
    render(<SavedViews />);
    fireEvent.click(screen.getByRole("button", { name: "Saved views" }));
    await screen.findByText("best lr", undefined, SLOW);
    expect(String(fetchMock.mock.calls[0][0])).toBe("/api/v1/views?saved=true&page=experiments");
    fireEvent.click(screen.getByRole("button", { name: "Save" }));
    expect(screen.getByRole("alert").textContent).toBe("Name the view to save it.");
    fireEvent.change(screen.getByLabelText("View name"), { target: { value: "vision diff" } });
    fireEvent.click(screen.getByRole("button", { name: "Save" }));
    await waitFor(() => expect(fetchMock.mock.calls.some(([, i]) => i.method === "POST")).toBe(true), SLOW);
    const posted = fetchMock.mock.calls.find(([, i]) => i.method === "POST")!;
    expect(JSON.parse(posted[1].body)).toEqual({ state: "p=vision&diff=1", name: "vision diff", page: "experiments" });

    fireEvent.click(screen.getByLabelText("Delete the view best lr"));
    expect(screen.getByRole("dialog")).toBeTruthy();
    expect(fetchMock.mock.calls.some(([, i]) => i.method === "DELETE")).toBe(false);
    fireEvent.click(screen.getByRole("button", { name: "Delete" }));
    await waitFor(() => expect(fetchMock.mock.calls.some(([u, i]) => i.method === "DELETE" && u === "/api/v1/views/v1")).toBe(true), SLOW);

    fireEvent.click(await screen.findByTitle("Open best lr", undefined, SLOW));
    expect(window.location.pathname + window.location.search).toBe("/experiments?sweep=swp_1&g=c.lr");
  });
});
