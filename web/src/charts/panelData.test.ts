import { describe, expect, it } from "vitest";
import { lastValue, nearestValue } from "./panelData";

describe("readout lookups", () => {
  it("finds the nearest value to a hovered index, within reach", () => {
    const col = [null, 1, null, null, 4, null];
    expect(nearestValue(col, 1)).toBe(1);
    expect(nearestValue(col, 2)).toBe(1);
    expect(nearestValue(col, 3)).toBe(4);
    expect(nearestValue(col, 5, 0)).toBe(-1);
    expect(nearestValue(col, 9)).toBe(-1);
  });

  it("finds a run's latest value when a longer run sets the x range", () => {
    expect(lastValue([1, 2, null, null])).toBe(1);
    expect(lastValue([null, null])).toBe(-1);
    expect(lastValue([])).toBe(-1);
  });
});
