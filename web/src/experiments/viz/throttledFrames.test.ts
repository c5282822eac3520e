import { describe, expect, it } from "vitest";
import { ThrottledFrames } from "./throttledFrames";

// Hand-driven frames and timers, and a clock the test moves.
function rig() {
  let now = 0;
  const frames = new Map<number, () => void>();
  const timers = new Map<number, { fn: () => void; at: number }>();
  let id = 0;
  const t = new ThrottledFrames(250, () => now,
    { request: (cb) => { frames.set(++id, cb); return id; }, cancel: (h) => { frames.delete(h); } },
    { set: (fn, ms) => { timers.set(++id, { fn, at: now + ms }); return id as unknown as ReturnType<typeof setTimeout>; },
      clear: (h) => { timers.delete(h as unknown as number); } });
  const frame = () => { const due = [...frames.values()]; frames.clear(); due.forEach((f) => f()); };
  const advance = (ms: number) => {
    now += ms;
    for (const [k, v] of [...timers]) if (v.at <= now) { timers.delete(k); v.fn(); }
  };
  return { t, frame, advance, frames, timers };
}

describe("ThrottledFrames", () => {
  it("runs the first request at the next frame, later ones no sooner than 250 ms after the last ran, together", () => {
    const { t, frame, advance, frames } = rig();
    const ran: string[] = [];
    t.request(() => ran.push("a"));
    frame();
    expect(ran).toEqual(["a"]);
    advance(10);
    t.request(() => ran.push("b"));
    advance(100);
    t.request(() => ran.push("c"));
    frame();
    expect(ran).toEqual(["a"]); // waiting
    advance(139);
    expect(frames.size).toBe(0);
    advance(1); // 250 ms after a ran: both b and c go to the same frame
    frame();
    expect(ran).toEqual(["a", "b", "c"]);
  });

  it("cancels a waiting request and a requested frame", () => {
    const { t, frame, advance } = rig();
    const ran: string[] = [];
    t.request(() => ran.push("a"));
    frame();
    const waiting = t.request(() => ran.push("b"));
    t.cancel(waiting);
    advance(300);
    frame();
    const soon = t.request(() => ran.push("c"));
    t.cancel(soon);
    frame();
    expect(ran).toEqual(["a"]);
  });

  it("waits the new minMs once it changes (slower while live runs are followed)", () => {
    const { t, frame, advance, frames } = rig();
    const ran: string[] = [];
    t.request(() => ran.push("a"));
    frame();
    t.minMs = 1000;
    t.request(() => ran.push("b"));
    advance(999);
    expect(frames.size).toBe(0);
    advance(1);
    frame();
    expect(ran).toEqual(["a", "b"]);
  });
});
