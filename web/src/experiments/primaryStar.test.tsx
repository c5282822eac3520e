import { fireEvent, render, screen, waitFor } from "@testing-library/react";
import { afterEach, describe, expect, it, vi } from "vitest";
import { MetricStar, workspaceScope } from "./primaryStar";
import { wsRun } from "./testRuns";

describe("the workspace's ★", () => {
  afterEach(() => vi.unstubAllGlobals());

  it("sets the primary metric where the selection names one scope: its experiment, a sweep's, or its project", () => {
    const runs = [wsRun("a", { experiment_id: "exp_1", experiment: "lr-study" }), wsRun("b", { experiment_id: "exp_1" })];
    expect(workspaceScope({ p: [], e: [], sweep: "swp_1" }, runs)).toEqual(
      { level: "experiment", label: "experiment lr-study", body: { experiment: "exp_1" } });
    expect(workspaceScope({ p: [], e: ["exp_1"], sweep: "" }, runs)?.body).toEqual({ experiment: "exp_1" });
    expect(workspaceScope({ p: ["vision"], e: [], sweep: "" }, runs)).toEqual(
      { level: "project", label: "project vision", body: { project: "vision" } });
    expect(workspaceScope({ p: ["vision", "nlp"], e: [], sweep: "" }, runs)).toBeNull();
    expect(workspaceScope({ p: ["vision"], e: ["exp_1"], sweep: "" }, runs)).toBeNull();
    expect(workspaceScope({ p: [], e: [], sweep: "swp_1" }, [...runs, wsRun("c", { experiment_id: "exp_2" })])).toBeNull();
  });

  it("sets the metric, or unsets it where it is the primary, and reloads", async () => {
    const fetchMock = vi.fn(async () => new Response(JSON.stringify({ primary_metric: {} }), { status: 200 }));
    vi.stubGlobal("fetch", fetchMock);
    const onChanged = vi.fn();
    const scope = { level: "project" as const, label: "project vision", body: { project: "vision" } };
    const { rerender } = render(<MetricStar name="val/loss" primary="acc" scope={scope} onChanged={onChanged} />);
    fireEvent.click(screen.getByLabelText("val/loss: primary metric of project vision"));
    await waitFor(() => expect(onChanged).toHaveBeenCalledTimes(1));
    const [url, init] = fetchMock.mock.calls[0] as unknown as [string, RequestInit];
    expect([url, init.method, JSON.parse(String(init.body))]).toEqual(["/api/v1/primary-metric", "PUT", { metric: "val/loss", project: "vision" }]);
    rerender(<MetricStar name="val/loss" primary="val/loss" scope={scope} onChanged={onChanged} />);
    fireEvent.click(screen.getByLabelText("val/loss: primary metric of project vision"));
    await waitFor(() => expect(onChanged).toHaveBeenCalledTimes(2));
    expect(JSON.parse(String((fetchMock.mock.calls[1] as unknown as [string, RequestInit])[1].body))).toEqual({ metric: null, project: "vision" });
  });
});
