import { describe, expect, it } from "vitest";
import { colorOf, colorsFor, PALETTE } from "./colors";
import { lttb } from "./lttb";

describe("run colors", () => {
  it("gives a run the same color on every call", () => {
    expect(colorOf("run_01ABC")).toBe(colorOf("run_01ABC"));
  });

  it("never repeats a color within a set while the palette lasts, whatever the order", () => {
    const ids = Array.from({ length: PALETTE.length }, (_, i) => `run_${i}`);
    const a = colorsFor(ids);
    const b = colorsFor([...ids].reverse());
    expect(new Set(a.values()).size).toBe(PALETTE.length);
    for (const id of ids) expect(a.get(id)).toBe(b.get(id));
  });

  it("keeps a run's hashed color when it does not collide", () => {
    const only = colorsFor(["run_x"]);
    expect(only.get("run_x")).toBe(colorOf("run_x"));
  });
});

describe("lttb", () => {
  it("keeps the endpoints and the peak", () => {
    const xs = Array.from({ length: 1000 }, (_, i) => i);
    const ys = xs.map((x) => (x === 500 ? 100 : Math.sin(x / 50)));
    const [ox, oy] = lttb(xs, ys, 50);
    expect(ox).toHaveLength(50);
    expect(ox[0]).toBe(0);
    expect(ox[49]).toBe(999);
    expect(oy).toContain(100);
  });

  it("returns short input unchanged", () => {
    expect(lttb([1, 2], [3, 4], 10)).toEqual([[1, 2], [3, 4]]);
  });
});
