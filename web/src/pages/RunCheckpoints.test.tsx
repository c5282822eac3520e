import { render } from "@testing-library/react";
import { describe, expect, it } from "vitest";
import type { CheckpointList, Evaluation } from "../api/types";
import { checkpoint, evaluation } from "../test/wire";
import { EvaluationsTable } from "./Evaluations";
import { CheckpointsTable } from "./RunCheckpoints";

const list: CheckpointList = {
  metric: "val/loss", direction: "minimize", best_id: "ck_2",
  checkpoints: [
    checkpoint({ id: "ck_1", run_id: "r", step: 100, path: "/w/step_100.pt", size_bytes: 2048, created_at: 1, metric_value: 0.5,
      fingerprint: "sha1:aaaaaaaa11111111" }),
    checkpoint({ id: "ck_2", run_id: "r", step: 200, path: "/w/step_200.pt", size_bytes: 4096, created_at: 2, metric_value: 0.25,
      best: true, parent_id: "ck_1", fingerprint: "sha1:bbbbbbbb22222222",
      evaluations: [{ id: "ev_1", job_id: null, suite: "mmlu", dataset: null, metrics: { acc: 0.61 }, status: "SUCCEEDED",
        created_at: 3 }] }),
  ],
};

describe("CheckpointsTable", () => {
  it("shows step, path, size, fingerprint, parent, the metric, evaluations and the best", () => {
    const { container } = render(<CheckpointsTable list={list} primaryChosen />);
    const heads = [...container.querySelectorAll("thead th")].map((th) => th.textContent);
    expect(heads).toEqual(["Step", "Path", "Size", "Fingerprint", "Parent", "val/loss", "Evaluations", "Registered"]);
    const rows = [...container.querySelectorAll("tbody tr")];
    expect(rows.map((r) => r.getAttribute("data-checkpoint"))).toEqual(["ck_2", "ck_1"]);
    const cells = (r: Element) => [...r.querySelectorAll("td")].map((td) => td.textContent);
    expect(cells(rows[0]).slice(0, 7)).toEqual(["200best", "/w/step_200.pt", "4.0 KiB", "sha1:bbbbbbbb", "step 100", "0.25", "mmlu: acc 0.61"]);
    expect(rows[0].className).toBe("best-row");
    expect(cells(rows[1]).slice(3, 7)).toEqual(["sha1:aaaaaaaa", "—", "0.5", "—"]);
  });

  it("leaves out the columns no checkpoint has", () => {
    const plain: CheckpointList = { metric: null, direction: null, best_id: null,
      checkpoints: [checkpoint({ id: "ck_1", run_id: "r", step: 1, path: "/p", size_bytes: 1, created_at: 1 })] };
    const { container } = render(<CheckpointsTable list={plain} primaryChosen={false} />);
    expect([...container.querySelectorAll("thead th")].map((th) => th.textContent)).toEqual(["Step", "Path", "Size", "Registered"]);
  });

  it("points to the metrics' stars while no primary metric is set", () => {
    const note = (primaryChosen: boolean) =>
      render(<CheckpointsTable list={list} primaryChosen={primaryChosen} />).container.querySelector(".tab-note")?.textContent;
    expect(note(false)).toBe("Ranked by val/loss (lower is better). The ☆ on a metric's chart (Metrics tab) makes it the primary metric.");
    expect(note(true)).toBe("Ranked by val/loss (lower is better), the primary metric.");
  });
});

describe("EvaluationsTable", () => {
  it("has a column per metric and a row per evaluation, newest first", () => {
    const evals: Evaluation[] = [
      evaluation({ id: "e1", checkpoint_id: "ck_1", suite: "mmlu", dataset: "test", metrics: { acc: 0.5 }, status: "SUCCEEDED",
        runtime_s: 90, created_at: 1, finished_at: 5, checkpoint_run_id: "run_a", checkpoint_step: 100, checkpoint_path: "/w/a.pt" }),
      evaluation({ id: "e2", checkpoint_id: "ck_2", suite: "gsm8k", metrics: { acc: 0.7, em: 0.4 }, status: "FAILED", created_at: 2 }),
    ];
    const { container } = render(<EvaluationsTable evaluations={evals} />);
    expect([...container.querySelectorAll("thead th")].map((th) => th.textContent)).toEqual(
      ["Checkpoint", "Evaluation", "Status", "acc", "em", "Runtime", "Finished"]);
    const rows = [...container.querySelectorAll("tbody tr")];
    expect(rows.map((r) => r.getAttribute("data-evaluation"))).toEqual(["e2", "e1"]);
    const cells = [...rows[1].querySelectorAll("td")].map((td) => td.textContent);
    expect(cells.slice(0, 5)).toEqual(["step 100/w/a.pt", "mmlu / test", "succeeded", "0.5", "—"]);
    expect(rows[1].querySelector("a")?.getAttribute("href")).toBe("/runs/run_a?tab=checkpoints");
  });
});
