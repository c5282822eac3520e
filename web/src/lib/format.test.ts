import { describe, expect, it } from "vitest";
import { cleanLogLine, fmtDuration, fmtTick, fmtTimeTicks, fmtValue } from "./format";

describe("format", () => {
  it("formats axis ticks short, and leaves log-scale gaps empty", () => {
    expect([0, 0.25, 1500, 3e-4, 2.5e-4, 2_500_000].map(fmtTick)).toEqual(["0", "0.25", "1500", "3e-4", "2.5e-4", "2.5e6"]);
    expect(fmtTick(null)).toBe("");
  });

  it("formats metric values with 4 significant digits, keeping every integer digit", () => {
    expect([0.123456, 1800.46, 12345.678, 1e-5, NaN, Infinity, null].map(fmtValue))
      .toEqual(["0.1235", "1800.5", "12346", "1.000e-5", "NaN", "∞", "—"]);
  });

  it("labels time ticks by the span shown", () => {
    const t = new Date(2026, 10, 30, 1, 43, 49, 120).getTime();
    expect(fmtTimeTicks([t, null], 2_000)).toEqual(["43:49.120", ""]);
    expect(fmtTimeTicks([t], 3_600_000)).toEqual(["01:43"]);
    expect(fmtTimeTicks([t], 60_000)).toEqual(["01:43:49"]);
  });

  it("shows what a terminal would for colored and carriage-return lines", () => {
    expect(cleanLogLine("\x1b[32mok\x1b[0m done")).toBe("ok done");
    expect(cleanLogLine(" 10%|#  \r 50%|#####\r100%|##########")).toBe("100%|##########");
  });

  it("formats durations", () => {
    expect([500, 61_000, 3_723_000, 200_000_000].map(fmtDuration)).toEqual(["0s", "1m 01s", "1h 02m", "2d 7h"]);
  });
});
