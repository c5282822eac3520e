import { act, render } from "@testing-library/react";
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import type { StreamState } from "../api/sse";
import { elapse, wire } from "../test/streams";
import { DiagnosisTab } from "./RunDiagnosis";

const DIAGNOSIS = /^GET \/api\/v1\/runs\/run_a\/diagnosis$/;

describe("a live run's diagnosis", () => {
  beforeEach(() => vi.useFakeTimers({ toFake: ["setTimeout", "clearTimeout", "setInterval", "clearInterval", "Date"] }));
  afterEach(() => {
    vi.useRealTimers();
    vi.unstubAllGlobals();
  });

  it("is asked again when the run's events stream brings an event, polled only while that stream is down", async () => {
    let n = 0;
    const w = wire(/\/events\/stream$/, () => ({ summary: `diagnosis ${++n}`, findings: [], next_actions: [] }));
    const tab = (state: StreamState, pushes: number) => <DiagnosisTab runId="run_a" live events={{ state, pushes }} />;
    const { container, rerender } = render(tab("open", 0));
    const advance = (ms: number) => elapse(ms, act);
    await advance(0);
    expect(container.textContent).toContain("diagnosis 1");

    await advance(60_000); // the stream is up and brings nothing: nothing asked
    expect(w.count(DIAGNOSIS)).toBe(1);

    rerender(tab("open", 1)); // an event of the run: asked at once
    await advance(0);
    expect(w.count(DIAGNOSIS)).toBe(2);
    expect(container.textContent).toContain("diagnosis 2");
    rerender(tab("open", 2)); // a burst: one more, after the throttle's period
    rerender(tab("open", 3));
    await advance(4000);
    expect(w.count(DIAGNOSIS)).toBe(2);
    await advance(2000);
    expect(w.count(DIAGNOSIS)).toBe(3);

    rerender(tab("reconnecting", 3)); // down: polled
    await advance(31_000);
    expect(w.count(DIAGNOSIS)).toBeGreaterThanOrEqual(5);

    rerender(tab("open", 3)); // back: no more polling
    await advance(0);
    const back = w.count(DIAGNOSIS);
    await advance(60_000);
    expect(w.count(DIAGNOSIS)).toBe(back);
  });

  it("of a finished run is asked once, whatever its stream does", async () => {
    const w = wire(/\/events\/stream$/, () => ({ summary: "done", findings: [], next_actions: [] }));
    render(<DiagnosisTab runId="run_a" live={false} events={{ state: "failed", pushes: 0 }} />);
    await elapse(60_000, act);
    expect(w.count(DIAGNOSIS)).toBe(1);
  });
});
