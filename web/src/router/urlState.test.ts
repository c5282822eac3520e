import { describe, expect, it } from "vitest";
import { matchPath } from "./router";
import { bool, int, list, num, oneOf, parseState, patchSearch, range, str } from "./urlState";

const schema = {
  tab: oneOf(["metrics", "system", "events"] as const, "metrics"),
  smooth: num(0.6, 0, 0.99),
  n: int(100, 1, 1000),
  runs: list(),
  status: list(["RUNNING", "FAILED"]),
  xr: range(),
  logy: bool(false),
  q: str(),
};

describe("URL view state", () => {
  it("reads defaults from an empty query", () => {
    expect(parseState("", schema)).toEqual({ tab: "metrics", smooth: 0.6, n: 100, runs: [], status: [], xr: null,
      logy: false, q: "" });
  });

  it("reads typed values and rejects bad ones", () => {
    const s = parseState("?tab=events&smooth=0.9&n=50&runs=a,b,,c&status=RUNNING,BOGUS&xr=10..200&logy=1&q=lr%3D0.1", schema);
    expect(s).toEqual({ tab: "events", smooth: 0.9, n: 50, runs: ["a", "b", "c"], status: ["RUNNING"], xr: [10, 200],
      logy: true, q: "lr=0.1" });
    const bad = parseState("?tab=nope&smooth=abc&n=9999&xr=200..10", schema);
    expect(bad.tab).toBe("metrics");
    expect(bad.smooth).toBe(0.6);
    expect(bad.n).toBe(1000); // clamped
    expect(bad.xr).toBeNull(); // empty range
  });

  it("writes a patch, leaving defaults out and keeping unknown parameters", () => {
    const next = patchSearch("?keep=1&tab=events", schema, { tab: "metrics", runs: ["r1", "r2"], xr: [5, 10] });
    const params = new URLSearchParams(next);
    expect(params.get("keep")).toBe("1");
    expect(params.has("tab")).toBe(false);
    expect(params.get("runs")).toBe("r1,r2");
    expect(params.get("xr")).toBe("5..10");
    expect(next).toContain("runs=r1,r2"); // commas stay readable
  });

  it("round-trips every value through the URL", () => {
    const state = { tab: "system" as const, smooth: 0.25, n: 300, runs: ["x/y", "z"], status: ["FAILED"], xr: [1.5, 9] as [number, number],
      logy: true, q: "a b&c" };
    expect(parseState(patchSearch("", schema, state), schema)).toEqual(state);
  });

  it("clears a parameter set back to its default", () => {
    expect(patchSearch("?logy=1&q=x", schema, { logy: false, q: "" })).toBe("");
  });
});

describe("matchPath", () => {
  it("matches patterns and decodes params", () => {
    expect(matchPath("/runs/:id", "/runs/run_01%2F")).toEqual({ id: "run_01/" });
    expect(matchPath("/runs/:id", "/runs")).toBeNull();
    expect(matchPath("/jobs", "/jobs/")).toEqual({});
    expect(matchPath("/jobs/:id", "/runs/x")).toBeNull();
  });
});
