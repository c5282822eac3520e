import { describe, expect, it } from "vitest";
import { colorOf, colorsFor, PALETTE } from "./colors";

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
