import { describe, expect, it } from "vitest";
import { parseState, patchSearch } from "../router/urlState";
import { esc, parseFilter, unesc, viewSchema, type ExperimentsView } from "./viewState";
import { scrollToRow, virtualWindow } from "./virtual";

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
  it("renders the visible rows and an overscan, with spacers for the rest", () => {
    expect(virtualWindow(0, 320, 32, 1000, 5)).toEqual({ start: 0, end: 15, before: 0, after: 985 * 32 });
    const w = virtualWindow(3200, 320, 32, 1000, 5);
    expect([w.start, w.end, w.before, w.after]).toEqual([95, 115, 95 * 32, 885 * 32]);
    expect(virtualWindow(31_900, 320, 32, 1000, 5)).toMatchObject({ start: 991, end: 1000, after: 0 });
    expect(virtualWindow(0, 320, 32, 0)).toEqual({ start: 0, end: 0, before: 0, after: 0 });
    const at = virtualWindow(12_345, 480, 32, 1000, 3);
    expect(at.before + (at.end - at.start) * 32 + at.after).toBe(32_000);
  });

  it("scrolls just enough to show a row", () => {
    expect(scrollToRow(5, 0, 320, 32)).toBe(0);
    expect(scrollToRow(10, 0, 320, 32)).toBe(32);
    expect(scrollToRow(2, 320, 320, 32)).toBe(64);
  });
});
