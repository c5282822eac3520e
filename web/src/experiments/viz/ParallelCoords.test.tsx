import { act, cleanup, fireEvent, render } from "@testing-library/react";
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { BRUSH_PAUSE_MS, ParallelCoords } from "./ParallelCoords";
import { brushDrag } from "./brushDrag";
import { fakeWidth, nextFrame, recordCanvas, type CanvasRecorder } from "./testCanvas";
import type { Axis, Brush, Brushes, VizRow } from "./types";

const rows: VizRow[] = [
  { id: "a", values: { lr: 0.001, opt: "adam", "metric:loss": 1 } },
  { id: "b", values: { lr: 0.01, opt: "sgd", "metric:loss": 2 } },
  { id: "c", values: { lr: 0.1, opt: null, "metric:loss": 3 } },
];
const axes: Axis[] = [
  { key: "lr", label: "optim.lr", kind: "log" },
  { key: "opt", label: "optimizer", kind: "category" },
  { key: "metric:loss", label: "loss (min)", kind: "linear" },
];
const colors = new Map([["a", "#ff0000"], ["b", "#00ff00"], ["c", "#0000ff"]]);

let canvas: CanvasRecorder;
let restoreWidth: () => void;
beforeEach(() => {
  canvas = recordCanvas();
  restoreWidth = fakeWidth(600);
});
afterEach(() => {
  cleanup(); // unmount before the canvas stand-ins go
  canvas.uninstall();
  restoreWidth();
});

const strokeColours = () => canvas.calls.filter((c) => c.op === "set:strokeStyle").map((c) => c.args[0]);

async function draw(brushes: Brushes = {}, onBrush = vi.fn(), onHover = vi.fn()) {
  const view = render(<ParallelCoords axes={axes} rows={rows} colors={colors} brushes={brushes} onBrush={onBrush} onHover={onHover}
    height={300} />);
  await act(nextFrame);
  return { ...view, onBrush, onHover, canvasEl: view.container.querySelector("canvas")! };
}

describe("ParallelCoords", () => {
  it("draws a line per run in its colour and names every axis", async () => {
    const { container } = await draw();
    expect(strokeColours()).toEqual(expect.arrayContaining(["#ff0000", "#00ff00", "#0000ff"]));
    const texts = canvas.calls.filter((c) => c.op === "fillText").map((c) => c.args[0]);
    expect(texts).toEqual(expect.arrayContaining(["optim.lr", "optimizer", "loss (min)", "adam", "sgd", "null"]));
    expect(container.querySelector(".viz-pc")?.getAttribute("data-passing")).toBe("3");
  });

  it("draws runs outside the brushes faint, not in their colour", async () => {
    const { container } = await draw({ opt: { kind: "set", values: ["adam"] } });
    expect(strokeColours()).toContain("#ff0000");
    expect(strokeColours()).not.toContain("#00ff00");
    expect(container.textContent).toContain("1 of 3 runs inside the brushes");
  });

  it("turns a drag along an axis into a brush, told when the pointer rests and when let go, and a click into a clear", async () => {
    const { canvasEl, onBrush } = await draw();
    // The loss axis is the last, at x = 600 - 44; the plot spans y 36..286, loss 1 at the bottom, 3 at the top.
    fireEvent.pointerDown(canvasEl, { clientX: 556, clientY: 286, button: 0, pointerId: 1 });
    fireEvent.pointerMove(canvasEl, { clientX: 556, clientY: 200, pointerId: 1 });
    await act(nextFrame);
    fireEvent.pointerMove(canvasEl, { clientX: 556, clientY: 161, pointerId: 1 });
    await act(nextFrame);
    expect(onBrush).not.toHaveBeenCalled(); // moving: the chart draws the brush, the page is not told yet
    await act(() => new Promise((r) => setTimeout(r, BRUSH_PAUSE_MS + 30)));
    await act(nextFrame);
    expect(onBrush).toHaveBeenCalledTimes(1);
    const [key, brush] = onBrush.mock.calls[0] as [string, Brush];
    expect(key).toBe("metric:loss");
    expect(brush).toMatchObject({ kind: "range", min: 1 });
    expect((brush as { max: number }).max).toBeCloseTo(2);
    fireEvent.pointerUp(canvasEl, { clientX: 556, clientY: 161, pointerId: 1 });
    expect(onBrush).toHaveBeenCalledTimes(1); // the same brush: not told twice
    // A drag let go without resting: told once, at the release.
    fireEvent.pointerDown(canvasEl, { clientX: 556, clientY: 286, button: 0, pointerId: 1 });
    fireEvent.pointerMove(canvasEl, { clientX: 556, clientY: 120, pointerId: 1 });
    await act(nextFrame);
    fireEvent.pointerUp(canvasEl, { clientX: 556, clientY: 120, pointerId: 1 });
    expect(onBrush).toHaveBeenCalledTimes(2);
    expect((onBrush.mock.calls[1][1] as { max: number }).max).toBeCloseTo(2.33, 1);
    fireEvent.pointerDown(canvasEl, { clientX: 556, clientY: 150, button: 0, pointerId: 1 });
    fireEvent.pointerUp(canvasEl, { clientX: 556, clientY: 150, pointerId: 1 });
    expect(onBrush).toHaveBeenLastCalledWith("metric:loss", null);
  });

  it("survives its axes changing under a drag: the brush follows the axis by key, or the drag ends with it", async () => {
    const { canvasEl, onBrush, rerender } = await draw();
    fireEvent.pointerDown(canvasEl, { clientX: 556, clientY: 286, button: 0, pointerId: 1 });
    // The page drops the optimizer axis (it no longer varies): loss is now the second of two axes, still at x 556.
    const two = [axes[0], axes[2]];
    rerender(<ParallelCoords axes={two} rows={rows} colors={colors} brushes={{}} onBrush={onBrush} height={300} />);
    fireEvent.pointerMove(canvasEl, { clientX: 556, clientY: 161, pointerId: 1 });
    await act(() => new Promise((r) => setTimeout(r, BRUSH_PAUSE_MS + 30)));
    await act(nextFrame);
    expect(onBrush.mock.calls[0][0]).toBe("metric:loss");
    // Now the loss axis goes too, mid-drag: no error, and no brush told for another axis.
    rerender(<ParallelCoords axes={[axes[0], axes[1]]} rows={rows} colors={colors} brushes={{}} onBrush={onBrush} height={300} />);
    fireEvent.pointerMove(canvasEl, { clientX: 556, clientY: 100, pointerId: 1 });
    await act(nextFrame);
    fireEvent.pointerUp(canvasEl, { clientX: 556, clientY: 100, pointerId: 1 });
    expect(onBrush.mock.calls.every(([key]) => key === "metric:loss")).toBe(true);
  });

  it("redraws only the lines inside the brushes and the brushes on a drag frame; the axes, labels and faint runs stay on their own canvases", async () => {
    const { canvasEl, container } = await draw();
    expect(container.querySelectorAll("canvas")).toHaveLength(3);
    const before = canvas.calls.length;
    fireEvent.pointerDown(canvasEl, { clientX: 556, clientY: 286, button: 0, pointerId: 1 });
    fireEvent.pointerMove(canvasEl, { clientX: 556, clientY: 200, pointerId: 1 });
    await act(nextFrame);
    const frameCalls = canvas.calls.slice(before);
    expect(frameCalls.some((c) => c.op === "stroke")).toBe(true);
    expect(frameCalls.some((c) => c.op === "fillRect")).toBe(true); // the brush being dragged
    expect(frameCalls.filter((c) => c.op === "fillText" || c.op === "strokeText")).toHaveLength(0);
    // The runs outside the brush are not stroked again: they are on the faint layer, drawn once.
    expect(frameCalls.filter((c) => c.op === "set:globalAlpha" && c.args[0] === 0.18)).toHaveLength(0);
    expect(canvas.calls.slice(0, before).some((c) => c.op === "set:globalAlpha" && c.args[0] === 0.18)).toBe(true);
    fireEvent.pointerUp(canvasEl, { clientX: 556, clientY: 200, pointerId: 1 });
  });

  it("says a brush is being dragged from pointer down to up, for the charts to wait", async () => {
    const { canvasEl } = await draw();
    fireEvent.pointerDown(canvasEl, { clientX: 556, clientY: 286, button: 0, pointerId: 1 });
    expect(brushDrag.active).toBe(true);
    fireEvent.pointerMove(canvasEl, { clientX: 556, clientY: 200, pointerId: 1 });
    fireEvent.pointerUp(canvasEl, { clientX: 556, clientY: 200, pointerId: 1 });
    expect(brushDrag.active).toBe(false);
    // A drag whose pointer capture is lost without a pointerup (the window lost focus) ends too.
    fireEvent.pointerDown(canvasEl, { clientX: 556, clientY: 286, button: 0, pointerId: 2 });
    fireEvent(canvasEl, new Event("lostpointercapture", { bubbles: true }));
    expect(brushDrag.active).toBe(false);
  });

  it("brushes the categories a drag covers", async () => {
    const { canvasEl, onBrush } = await draw();
    // optimizer: 3 categories over 36..286, adam lowest (at 244), then null (161), sgd (78).
    fireEvent.pointerDown(canvasEl, { clientX: 300, clientY: 280, button: 0, pointerId: 1 });
    fireEvent.pointerMove(canvasEl, { clientX: 300, clientY: 150, pointerId: 1 });
    fireEvent.pointerUp(canvasEl, { clientX: 300, clientY: 150, pointerId: 1 });
    expect(onBrush).toHaveBeenLastCalledWith("opt", { kind: "set", values: ["adam", "null"] });
  });

  it("tells which run the pointer is over, once per change", async () => {
    const { canvasEl, onHover } = await draw();
    // Between the first two axes, halfway: run a runs from lr 0.001 (bottom, 286) to adam (244).
    fireEvent.pointerMove(canvasEl, { clientX: 172, clientY: 265 });
    fireEvent.pointerMove(canvasEl, { clientX: 173, clientY: 265 });
    expect(onHover.mock.calls).toEqual([["a"]]);
    fireEvent.pointerLeave(canvasEl);
    expect(onHover).toHaveBeenLastCalledWith(null);
  });

  it("sets brushes by keyboard: a range per numeric axis, a choice per category", async () => {
    const { getByLabelText, onBrush, container, getByText } = await draw({ lr: { kind: "range", min: 0.001, max: 0.01 } });
    const details = container.querySelector("details")!;
    expect(container.querySelector("form")).toBeNull(); // closed: not rendered
    details.open = true;
    fireEvent(details, new Event("toggle"));
    expect(getByText("Set brushes by keyboard")).toBeTruthy();
    expect((getByLabelText("optim.lr: from") as HTMLInputElement).value).toBe("0.001");
    fireEvent.change(getByLabelText("loss (min): from"), { target: { value: "1.5" } });
    fireEvent.change(getByLabelText("loss (min): to"), { target: { value: "2.5" } });
    fireEvent.submit(container.querySelector('form[data-axis="metric:loss"]')!);
    expect(onBrush).toHaveBeenLastCalledWith("metric:loss", { kind: "range", min: 1.5, max: 2.5 });
    fireEvent.click(getByLabelText("sgd"));
    expect(onBrush).toHaveBeenLastCalledWith("opt", { kind: "set", values: ["sgd"] });
    fireEvent.click(getByLabelText("Clear the brush on optim.lr"));
    expect(onBrush).toHaveBeenLastCalledWith("lr", null);
  });
});
