import { describe, expect, it } from "vitest";
import type { Sweep } from "../api/types";
import { allowedActions, parameterNames, progress, progressText, valuesText } from "./sweeps";

const counts = (c: Partial<Sweep["counts"]>): Sweep["counts"] => ({ total: 0, queued: 0, running: 0, succeeded: 0, failed: 0,
  cancelled: 0, ...c });

describe("a sweep's progress", () => {
  it("counts done, running, queued and failed, and how much has ended", () => {
    const p = progress({ counts: counts({ total: 8, succeeded: 3, running: 1, queued: 2, failed: 1, cancelled: 1 }) });
    expect(p).toMatchObject({ done: 3, running: 1, queued: 2, failed: 1, total: 8, ended: 5 / 8 });
    expect(progressText(p)).toBe("3 done · 1 running · 2 queued · 1 failed · 1 cancelled");
    expect(progressText(progress({ counts: counts({ total: 2, queued: 2 }) }))).toBe("0 done · 0 running · 2 queued · 0 failed");
    expect(progress({ counts: counts({}) }).ended).toBe(0);
  });
});

describe("a sweep's trials", () => {
  it("name their parameters in the order the trials give them, and their values as text", () => {
    expect(parameterNames([{ values: { lr: 0.1, bs: 32 } }, { values: { lr: 0.2, bs: 64, extra: "x" } }])).toEqual(["lr", "bs", "extra"]);
    expect(valuesText({ lr: 0.001, opt: "adam", warm: true })).toBe("lr=0.001, opt=adam, warm=true");
  });
});

describe("a sweep's actions", () => {
  const sweep = (status: string, paused: boolean, c: Partial<Sweep["counts"]>) => ({ status, paused, counts: counts(c) }) as Sweep;
  it("pause while trials wait, resume while paused, retry while some failed, cancel while some are open", () => {
    expect([...allowedActions(sweep("RUNNING", false, { queued: 2, running: 1 }))].sort()).toEqual(["cancel", "pause"]);
    expect([...allowedActions(sweep("PAUSED", true, { queued: 2, failed: 1 }))].sort()).toEqual(["cancel", "resume", "retry-failed"]);
    expect([...allowedActions(sweep("DONE", false, { succeeded: 2, failed: 1 }))]).toEqual(["retry-failed"]);
    expect([...allowedActions(sweep("CANCELLED", false, { cancelled: 2, failed: 1 }))]).toEqual([]);
  });
});
