import { act, fireEvent, render } from "@testing-library/react";
import { describe, expect, it, vi } from "vitest";
import { colorsFor } from "../charts/colors";
import { RUN_COLUMNS } from "./columns";
import { ROW_HEIGHT, RunsTable, type RunsTableProps } from "./RunsTable";
import { buildRows, configColumns, groupRows, metricColumns } from "./table";
import { wsMetric, wsRun } from "./testRuns";
import type { WorkspaceMetricInfo, WorkspaceRun } from "./types";

const LOSS: WorkspaceMetricInfo = { name: "val/loss", direction: "min", primary: true };

function runs(n: number): WorkspaceRun[] {
  return Array.from({ length: n }, (_, i) => wsRun(`run_${String(i).padStart(4, "0")}`, {
    name: `trial-${i}`, config: { "optim.lr": i % 3 === 0 ? null : i / 1000, opt: i % 2 ? "adam" : "sgd" },
    metrics: { "val/loss": wsMetric([100 + i, 1 + i], [50, i / 10], [0, 9]) },
  }));
}

function table(list: WorkspaceRun[], extra: Partial<RunsTableProps> = {}) {
  const rows = buildRows(list, [LOSS], {});
  const columns = [...RUN_COLUMNS, ...configColumns(["optim.lr", "opt"], rows), ...metricColumns([LOSS])];
  const props: RunsTableProps = { rows, groups: null, columns, metrics: [LOSS], choices: {}, onChoice: vi.fn(), sort: "",
    onSort: vi.fn(), baseline: "", onBaseline: vi.fn(), colors: colorsFor(list.map((r) => r.id)), ...extra };
  const utils = render(<RunsTable {...props} />);
  const box = utils.container.querySelector<HTMLDivElement>(".exp-table-scroll")!;
  const rendered = () => [...utils.container.querySelectorAll<HTMLTableRowElement>("tbody tr[data-run]")];
  const heads = [...utils.container.querySelectorAll("thead th")].map((th) => th.querySelector(".exp-col-label")?.textContent ?? "");
  const cell = (tr: HTMLTableRowElement, label: string) => tr.querySelectorAll("td")[heads.indexOf(label)];
  return { ...utils, props, box, rendered, cell, rows };
}

const frame = () => act(() => new Promise<void>((resolve) => requestAnimationFrame(() => resolve())));

describe("the runs table", () => {
  it("renders only the rows in view out of 1,000, with spacers standing for the rest", async () => {
    const t = table(runs(1000));
    const first = t.rendered();
    expect(first.length).toBeGreaterThan(10);
    expect(first.length).toBeLessThan(60);
    expect(first[0].dataset.run).toBe("run_0000");
    const spacer = t.container.querySelector<HTMLTableCellElement>("tr.exp-spacer td")!;
    expect(parseFloat(spacer.style.height)).toBe((1000 - first.length) * ROW_HEIGHT);
    expect(t.container.querySelector("table")!.getAttribute("aria-rowcount")).toBe("1001");

    t.box.scrollTop = 500 * ROW_HEIGHT;
    fireEvent.scroll(t.box);
    await frame();
    const later = t.rendered();
    expect(later.length).toBeLessThan(70);
    const shown = later.map((tr) => Number(tr.dataset.index));
    expect(shown).toContain(500);
    expect(later[0].getAttribute("aria-rowindex")).toBe(String(shown[0] + 2));
    const [top, bottom] = t.container.querySelectorAll<HTMLTableCellElement>("tr.exp-spacer td");
    expect(parseFloat(top.style.height) + later.length * ROW_HEIGHT + parseFloat(bottom.style.height)).toBe(1000 * ROW_HEIGHT);
  });

  it("shows typed cells: a null as —, a metric's chosen summary with its step, deltas against the baseline", () => {
    const t = table(runs(4), { baseline: "run_0001" });
    const [r0, r1, r2] = t.rendered();
    expect(t.cell(r0, "optim.lr").textContent).toBe("—");
    expect(t.cell(r0, "optim.lr").title).toBe("null");
    expect(t.cell(r2, "optim.lr").textContent).toBe("0.002 +0.001");
    // best of a "min" metric is its min, at its step; the baseline row shows no delta.
    expect(t.cell(r1, "val/loss").textContent).toBe("0.1 @50");
    expect(t.cell(r2, "val/loss").textContent).toBe("0.2 @50 +0.1");
    expect(t.cell(r2, "val/loss").title).toBe("0.2 at step 50");
    expect(r1.className).toContain("exp-baseline");
  });

  it("reports a summary choice, a sort and a baseline", () => {
    const t = table(runs(3), { sort: "m.val/loss" });
    const select = t.getByLabelText("Summary of val/loss") as HTMLSelectElement;
    expect(select.value).toBe("best");
    fireEvent.change(select, { target: { value: "last" } });
    expect(t.props.onChoice).toHaveBeenCalledWith("val/loss", "last");
    fireEvent.click(t.getByTitle("Sort by val/loss"));
    expect(t.props.onSort).toHaveBeenCalledWith("-m.val/loss");
    fireEvent.click(t.getByTitle("Sort by optim.lr"));
    expect(t.props.onSort).toHaveBeenLastCalledWith("c.optim.lr");
    fireEvent.click(t.getByLabelText("Make trial-2 the baseline"));
    expect(t.props.onBaseline).toHaveBeenCalledWith("run_0002");
  });

  it("moves the focused row with the arrow keys, End and Home; one row at a time is in the Tab order", async () => {
    const t = table(runs(1000));
    const link = (id: string) => t.container.querySelector<HTMLAnchorElement>(`tr[data-run="${id}"] a`)!;
    expect(link("run_0000").tabIndex).toBe(0);
    expect(link("run_0001").tabIndex).toBe(-1);
    link("run_0000").focus();
    fireEvent.keyDown(document.activeElement!, { key: "ArrowDown" });
    await frame();
    expect(document.activeElement).toBe(link("run_0001"));
    expect(link("run_0001").getAttribute("href")).toBe("/runs/run_0001");
    fireEvent.keyDown(document.activeElement!, { key: "End" });
    await frame();
    expect(document.activeElement?.closest("tr")?.dataset.run).toBe("run_0999");
    expect(t.box.scrollTop).toBeGreaterThan(900 * ROW_HEIGHT);
    fireEvent.keyDown(document.activeElement!, { key: "Home" });
    await frame();
    expect(document.activeElement).toBe(link("run_0000"));
  });

  it("groups rows under a header with the mean and range of each metric; a header folds its runs", () => {
    const list = runs(6);
    const rows = buildRows(list, [LOSS], {});
    const groups = groupRows(rows, "c.opt", ["m.val/loss"]);
    const t = table(list, { groups, groupLabel: "opt" });
    const headers = [...t.container.querySelectorAll<HTMLTableRowElement>("tr.exp-group-row")];
    expect(headers.map((h) => h.querySelector("button")!.textContent)).toEqual(["▾ opt = adam (3)", "▾ opt = sgd (3)"]);
    // adam: runs 1, 3, 5 with best losses 0.1, 0.3, 0.5.
    const lossCell = headers[0].querySelectorAll("td")[t.container.querySelectorAll("thead th").length - 1];
    expect(lossCell.textContent).toBe("0.3 [0.1, 0.5]");
    fireEvent.click(headers[0].querySelector("button")!);
    expect(t.rendered().map((tr) => tr.dataset.run)).toEqual(["run_0000", "run_0002", "run_0004"]);
  });

  it("while scrolling, rows take no pointer and a row sliding under it is no hover; after a pause, hovers count again", () => {
    vi.useFakeTimers({ toFake: ["setTimeout", "clearTimeout", "performance"] });
    try {
      const onHover = vi.fn();
      const t = table(runs(200), { onHover });
      const row = () => t.rendered()[3];
      fireEvent.mouseEnter(row());
      expect(onHover).toHaveBeenLastCalledWith("run_0003");
      onHover.mockClear();
      fireEvent.scroll(t.box);
      expect(t.box.classList.contains("exp-scrolling")).toBe(true);
      fireEvent.mouseEnter(t.rendered()[4]);
      expect(onHover).not.toHaveBeenCalled();
      vi.advanceTimersByTime(250);
      expect(t.box.classList.contains("exp-scrolling")).toBe(false);
      fireEvent.mouseEnter(t.rendered()[5]);
      expect(onHover).toHaveBeenLastCalledWith("run_0005");
    } finally {
      vi.useRealTimers();
    }
  });
});
