import { describe, expect, it } from "vitest";
import { parseState, patchSearch } from "../router/urlState";
import { esc, parseFilter, unesc, viewSchema, type ExperimentsView } from "./viewState";
import { sameWindow, scrollToRow, virtualWindow } from "./virtual";

describe("the Experiments view in the URL", () => {
  it("round-trips every part of the view, keys with the syntax's own characters included", () => {
    const view: ExperimentsView = {
      p: ["vision", "a,b"], e: ["exp_1"], sweep: "swp_9",
      hide: ["tags", "c.model:depth"], s: { "val/loss": "min", "a:b,c": "max" }, sort: "-m.val/loss",
      f: { status: { kind: "set", values: ["RUNNING", "FAILED"] }, "c.optim.lr": { kind: "range", min: 1e-4, max: null },
        "c.name~x": { kind: "text", text: "a,b=c|d" }, "c.depth": { kind: "range", min: -2, max: 0.5 } },
      g: "c.opt", diff: true, base: "run_1",
      m: "loss, eval/*", x: "ts", smooth: 0.3, xr: [10, 200],
      b: { "c.optim.lr": { kind: "range", min: 0.001, max: 0.01 }, "c.opt": { kind: "set", values: ["adam", "null"] } },
      sx: "c.optim.lr", sy: "m.val/loss",
    };
    const search = patchSearch("", viewSchema, view);
    expect(parseState(search, viewSchema)).toEqual(view);
    // A reload after a round trip writes the same address.
    expect(patchSearch("", viewSchema, parseState(search, viewSchema))).toBe(search);
  });

  it("leaves defaults out, and keeps a page's other parameters", () => {
    const empty = parseState("", viewSchema);
    expect(patchSearch("?keep=1", viewSchema, empty)).toBe("?keep=1");
    expect(empty).toMatchObject({ p: [], f: {}, s: {}, b: {}, diff: false, x: "step", smooth: 0.6, xr: null });
  });

  it("drops malformed filters and brushes instead of guessing", () => {
    expect(parseFilter("c.lr:abc..1")).toBeNull();
    expect(parseFilter("c.lr:..")).toBeNull();
    expect(parseFilter("nope")).toBeNull();
    expect(parseFilter("c.lr:..0.5")).toEqual(["c.lr", { kind: "range", min: null, max: 0.5 }]);
    const parsed = parseState("?b=c.lr:0.1..,c.x:2..1,c.y:1..2&s=loss:worst,acc:max", viewSchema);
    expect(parsed.b).toEqual({ "c.y": { kind: "range", min: 1, max: 2 } });
    expect(parsed.s).toEqual({ acc: "max" });
    expect(unesc(esc("%:,~=|"))).toBe("%:,~=|");
  });
});

describe("the virtual window", () => {
  it("renders the visible rows and a block to spare on each side, with spacers for the rest", () => {
    expect(virtualWindow(0, 320, 32, 1000, 16)).toEqual({ start: 0, end: 32, before: 0, after: 968 * 32 });
    // Rows 100..109 in view: blocks 80..127 rendered.
    expect(virtualWindow(3200, 320, 32, 1000, 16)).toEqual({ start: 80, end: 128, before: 80 * 32, after: 872 * 32 });
    expect(virtualWindow(31_900, 320, 32, 1000, 16)).toMatchObject({ start: 976, end: 1000, after: 0 });
    expect(virtualWindow(0, 320, 32, 0)).toEqual({ start: 0, end: 0, before: 0, after: 0 });
    for (const top of [0, 517, 12_345, 20_000, 31_680]) {
      const w = virtualWindow(top, 480, 32, 1000, 16);
      expect(w.before + (w.end - w.start) * 32 + w.after).toBe(32_000);
      // Every row in view is rendered, with at least a block more below it.
      expect(w.start).toBeLessThanOrEqual(Math.floor(top / 32));
      expect(w.end).toBeGreaterThanOrEqual(Math.min(1000, Math.ceil((top + 480) / 32) + 16));
    }
  });

  it("keeps the same window while the scroll stays inside a block", () => {
    const at = (top: number) => virtualWindow(top, 320, 32, 1000, 16);
    expect(sameWindow(at(3200), at(3200 + 32))).toBe(true);
    expect(sameWindow(at(3200), at(3200 + 12 * 32))).toBe(false);
  });

  it("scrolls just enough to show a row", () => {
    expect(scrollToRow(5, 0, 320, 32)).toBe(0);
    expect(scrollToRow(10, 0, 320, 32)).toBe(32);
    expect(scrollToRow(2, 320, 320, 32)).toBe(64);
  });
});
