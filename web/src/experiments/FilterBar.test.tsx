import { fireEvent, render, screen } from "@testing-library/react";
import { describe, expect, it, vi } from "vitest";
import { RUN_COLUMNS } from "./columns";
import { describeFilter, editorFor, FilterBar } from "./FilterBar";
import { buildRows, configColumns, metricColumns } from "./table";
import { wsMetric, wsRun } from "./testRuns";

const LOSS = { name: "loss", direction: "min" as const, primary: true };
const rows = buildRows(Array.from({ length: 20 }, (_, i) => wsRun(`r${i}`, {
  config: { lr: i / 100, opt: i % 2 ? "adam" : "sgd", note: `note ${i}`, flag: i % 3 === 0 ? null : i % 2 === 0 },
  metrics: { loss: wsMetric([9, i], [1, i / 2], [0, 9]) } })), [LOSS], {});
const columns = [...RUN_COLUMNS, ...configColumns(["lr", "opt", "note", "flag"], rows), ...metricColumns([LOSS])];
const col = (id: string) => columns.find((c) => c.id === id)!;

describe("the filter editor", () => {
  it("fits the column: a range for numbers and metrics, a set for the status and few values, contains for the rest", () => {
    expect(editorFor(col("c.lr"), rows)).toEqual({ kind: "range" });
    expect(editorFor(col("m.loss"), rows)).toEqual({ kind: "range" });
    expect(editorFor(col("status"), rows)).toMatchObject({ kind: "set", values: expect.arrayContaining(["RUNNING", "FAILED"]) });
    expect(editorFor(col("c.opt"), rows)).toEqual({ kind: "set", values: ["adam", "sgd"] });
    expect(editorFor(col("c.flag"), rows)).toEqual({ kind: "set", values: ["false", "null", "true"] });
    expect(editorFor(col("c.note"), rows)).toEqual({ kind: "text" });
    expect(describeFilter("lr", { kind: "range", min: 0.01, max: null })).toBe("lr ≥ 0.01");
    expect(describeFilter("opt", { kind: "set", values: ["adam"] })).toBe("opt ∈ {adam}");
  });

  it("filters a time column by dates and times, kept as epoch ms, and shows them as dates", () => {
    expect(editorFor(col("created"), rows)).toEqual({ kind: "range", time: true });
    const onChange = vi.fn();
    render(<FilterBar columns={columns} rows={rows} filters={{}} onChange={onChange} />);
    fireEvent.click(screen.getByRole("button", { name: "Filter" }));
    fireEvent.change(screen.getByLabelText("Filter column"), { target: { value: "created" } });
    expect(screen.queryByLabelText("Minimum")).toBeNull(); // no raw milliseconds to type
    fireEvent.change(screen.getByLabelText("From"), { target: { value: "2026-12-06T10:30" } });
    fireEvent.change(screen.getByLabelText("To"), { target: { value: "2026-12-05T10:30" } });
    fireEvent.click(screen.getByRole("button", { name: "Apply" }));
    expect(screen.getByRole("alert").textContent).toBe("From is after to.");
    fireEvent.change(screen.getByLabelText("To"), { target: { value: "" } });
    fireEvent.click(screen.getByRole("button", { name: "Apply" }));
    const from = new Date("2026-12-06T10:30").getTime();
    expect(onChange).toHaveBeenCalledWith("created", { kind: "range", min: from, max: null });
    expect(describeFilter("Created", { kind: "range", min: from, max: null }, true)).not.toContain(String(from));
    expect(describeFilter("Created", { kind: "range", min: from, max: null }, true)).toMatch(/^Created ≥ .*10:30/);
  });

  it("refuses a range that is not one, naming the problem, and applies a good one", () => {
    const onChange = vi.fn();
    render(<FilterBar columns={columns} rows={rows} filters={{}} onChange={onChange} />);
    fireEvent.click(screen.getByRole("button", { name: "Filter" }));
    fireEvent.change(screen.getByLabelText("Filter column"), { target: { value: "m.loss" } });
    fireEvent.change(screen.getByLabelText("Minimum"), { target: { value: "5" } });
    fireEvent.change(screen.getByLabelText("Maximum"), { target: { value: "2" } });
    fireEvent.click(screen.getByRole("button", { name: "Apply" }));
    expect(screen.getByRole("alert").textContent).toBe("Min is above max.");
    fireEvent.change(screen.getByLabelText("Maximum"), { target: { value: "abc" } });
    fireEvent.click(screen.getByRole("button", { name: "Apply" }));
    expect(screen.getByRole("alert").textContent).toBe("Min and max must be numbers (or empty for an open end).");
    expect(onChange).not.toHaveBeenCalled();
    fireEvent.change(screen.getByLabelText("Maximum"), { target: { value: "" } });
    fireEvent.click(screen.getByRole("button", { name: "Apply" }));
    expect(onChange).toHaveBeenCalledWith("m.loss", { kind: "range", min: 5, max: null });
  });

  it("edits an active filter from its chip and removes it with its ×", () => {
    const onChange = vi.fn();
    render(<FilterBar columns={columns} rows={rows} filters={{ "c.opt": { kind: "set", values: ["adam"] } }} onChange={onChange} />);
    fireEvent.click(screen.getByText("opt ∈ {adam}"));
    const sgd = screen.getByLabelText("sgd") as HTMLInputElement;
    expect((screen.getByLabelText("adam") as HTMLInputElement).checked).toBe(true);
    fireEvent.click(sgd);
    fireEvent.click(screen.getByRole("button", { name: "Apply" }));
    expect(onChange).toHaveBeenCalledWith("c.opt", { kind: "set", values: ["adam", "sgd"] });
    fireEvent.click(screen.getByLabelText("Remove the filter on opt"));
    expect(onChange).toHaveBeenLastCalledWith("c.opt", null);
  });
});
