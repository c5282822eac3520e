import { act, cleanup, fireEvent, render } from "@testing-library/react";
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { nearestDot, placeDots, Scatter } from "./Scatter";
import { fakeWidth, nextFrame, recordCanvas, type CanvasRecorder } from "./testCanvas";
import type { Axis, VizRow } from "./types";

const rows: VizRow[] = [
  { id: "a", values: { layers: 2, opt: "adam", loss: 1 } },
  { id: "b", values: { layers: 4, opt: "sgd", loss: 3 } },
  { id: "c", values: { layers: 6, opt: "adam", loss: null } },
];
const x: Axis = { key: "layers", label: "model.layers", kind: "linear" };
const y: Axis = { key: "loss", label: "val/loss", kind: "linear" };
const colors = new Map([["a", "#ff0000"], ["b", "#00ff00"], ["c", "#0000ff"]]);

describe("scatter dots", () => {
  it("places each run by its two values, brushed-out ones marked, none for a missing value", () => {
    // Plot area: x 56..384, y 10..224 (height 260, margins 10/36).
    const d = placeDots(rows, x, y, { layers: { kind: "range", min: 3, max: 10 } }, 400, 260);
    expect(d.xs[0]).toBeCloseTo(56);
    expect(d.xs[2]).toBeCloseTo(384);
    expect(d.ys[0]).toBeCloseTo(224);
    expect(d.ys[1]).toBeCloseTo(10);
    expect(Number.isNaN(d.ys[2])).toBe(true);
    expect(d.passing).toEqual([false, true, true]);
    expect(nearestDot(d, 60, 220)).toBe(0);
    expect(nearestDot(d, 200, 120)).toBe(-1);
  });

  it("spreads dots on a category axis a little, the same way every time", () => {
    const cat: Axis = { key: "opt", label: "opt", kind: "category" };
    const one = placeDots(rows, cat, y, {}, 400, 260);
    const two = placeDots(rows, cat, y, {}, 400, 260);
    expect(Array.from(one.xs)).toEqual(Array.from(two.xs));
    expect(one.xs[0]).not.toBe(one.xs[2]); // both "adam", apart
    expect(Math.abs(one.xs[0] - one.xs[2])).toBeLessThan(164 / 2);
  });
});

describe("Scatter", () => {
  let canvas: CanvasRecorder;
  let restore: () => void;
  beforeEach(() => {
    canvas = recordCanvas();
    restore = fakeWidth(400);
  });
  afterEach(() => {
    cleanup(); // unmount before the canvas stand-ins go
    canvas.uninstall();
    restore();
  });

  it("draws a dot per placed run, in its colour unless brushed out, and names the run under the pointer", async () => {
    const onHover = vi.fn();
    const { container } = render(<Scatter rows={rows} x={x} y={y} colors={colors} onHover={onHover}
      brushes={{ layers: { kind: "range", min: 3, max: 10 } }} labels={new Map([["b", "run-b"]])} />);
    await act(nextFrame);
    expect(canvas.calls.filter((c) => c.op === "arc")).toHaveLength(2); // c has no loss
    const fills = canvas.calls.filter((c) => c.op === "set:fillStyle").map((c) => c.args[0]);
    expect(fills).toContain("#00ff00");
    expect(fills).not.toContain("#ff0000"); // a is brushed out: drawn faint
    const el = container.querySelector("canvas")!;
    fireEvent.pointerMove(el, { clientX: 220, clientY: 12 });
    expect(onHover).toHaveBeenLastCalledWith("b");
    const tip = container.querySelector(".viz-tip") as HTMLElement;
    expect(tip.hidden).toBe(false);
    expect(tip.textContent).toBe("run-b · model.layers 4 · val/loss 3");
    fireEvent.pointerLeave(el);
    expect(onHover).toHaveBeenLastCalledWith(null);
    expect(tip.hidden).toBe(true);
  });
});
