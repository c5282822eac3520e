import { act, renderHook } from "@testing-library/react";
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { elapse, wire } from "../test/streams";
import { ChangesFeed, changes } from "./changes";
import { useResource } from "./hooks";
import type { SSEMessage, StreamState } from "./sse";

/** A stream the test drives by hand: what the feed opened, what it was told, whether it was closed. */
class HandStream {
  closed = false;
  constructor(readonly onMessage: (m: SSEMessage) => void, readonly onState: (s: StreamState) => void) {}
  close() { this.closed = true; }
  send(event: string, topics: string[]) { this.onMessage({ event, data: JSON.stringify({ topics }), id: null }); }
}

function handFeed(lingerMs = 1000) {
  const opened: HandStream[] = [];
  const feed = new ChangesFeed({ lingerMs, open: (onMessage, onState) => {
    const s = new HandStream(onMessage, onState);
    opened.push(s);
    return s;
  } });
  return { feed, opened };
}

describe("ChangesFeed", () => {
  beforeEach(() => vi.useFakeTimers());
  afterEach(() => vi.useRealTimers());

  it("shares one stream among its subscribers, and closes it once the last has left", () => {
    const { feed, opened } = handFeed(1000);
    const a = feed.subscribe(["jobs"], { onChange: vi.fn() });
    const b = feed.subscribe(["runs"], { onChange: vi.fn() });
    expect(opened.length).toBe(1);
    a();
    vi.advanceTimersByTime(5000);
    expect(opened[0].closed).toBe(false); // b still follows it
    b();
    vi.advanceTimersByTime(999);
    expect(opened[0].closed).toBe(false); // lingers: a page change resubscribes at once
    const c = feed.subscribe(["nodes"], { onChange: vi.fn() });
    vi.advanceTimersByTime(5000);
    expect([opened.length, opened[0].closed]).toEqual([1, false]);
    c();
    vi.advanceTimersByTime(1000);
    expect([opened[0].closed, feed.following]).toEqual([true, false]);
    feed.subscribe(["jobs"], { onChange: vi.fn() });
    expect(opened.length).toBe(2); // a new subscriber opens a new one
  });

  it("refetches on a changes event naming one of a subscriber's topics only, and everyone on ready", () => {
    const { feed, opened } = handFeed();
    const jobs = vi.fn();
    const runs = vi.fn();
    feed.subscribe(["jobs", "groups"], { onChange: jobs });
    feed.subscribe(["runs"], { onChange: runs });
    const s = opened[0];
    s.onState("open");
    s.send("ready", ["groups", "jobs", "runs"]);
    expect([jobs.mock.calls.length, runs.mock.calls.length]).toEqual([1, 1]);
    s.send("changes", ["groups"]);
    expect([jobs.mock.calls.length, runs.mock.calls.length]).toEqual([2, 1]);
    s.send("changes", ["events", "nodes"]);
    expect([jobs.mock.calls.length, runs.mock.calls.length]).toEqual([2, 1]);
    s.send("changes", ["jobs", "runs"]);
    expect([jobs.mock.calls.length, runs.mock.calls.length]).toEqual([3, 2]);
    s.onMessage({ event: "changes", data: "not json", id: null }); // ignored, not thrown
    s.send("ready", ["jobs", "runs"]); // a reconnect: what it missed is fetched by all
    expect([jobs.mock.calls.length, runs.mock.calls.length]).toEqual([4, 3]);
  });

  it("says a subscriber is down while the stream is reconnecting or refused, or does not carry its topics", () => {
    const { feed, opened } = handFeed();
    const jobsDown: boolean[] = [];
    const auditDown: boolean[] = [];
    feed.subscribe(["jobs"], { onChange: () => undefined, onDown: (d) => jobsDown.push(d) });
    feed.subscribe(["audit"], { onChange: () => undefined, onDown: (d) => auditDown.push(d) });
    const s = opened[0];
    s.onState("open");
    s.send("ready", ["jobs", "runs"]); // this caller may not read the audit log
    expect([jobsDown, auditDown]).toEqual([[], [true]]);
    s.onState("reconnecting");
    s.onState("reconnecting");
    expect(jobsDown).toEqual([true]);
    s.onState("open");
    expect(jobsDown).toEqual([true, false]);
    s.onState("failed");
    expect(jobsDown).toEqual([true, false, true]);
    const late: boolean[] = [];
    feed.subscribe(["runs"], { onChange: () => undefined, onDown: (d) => late.push(d) });
    expect(late).toEqual([true]); // joining a refused stream: down from the start
    expect(opened.length).toBe(1);
  });

  it("tries a refused stream afresh for the next page, not for each subscriber of this one", () => {
    const { feed, opened } = handFeed();
    const leave = feed.subscribe(["jobs"], { onChange: () => undefined });
    opened[0].onState("failed"); // a 401: the app goes to sign-in, and its pages leave
    leave();
    const down: boolean[] = [];
    feed.subscribe(["jobs"], { onChange: () => undefined, onDown: (d) => down.push(d) }); // signed in again, within the linger
    feed.subscribe(["runs"], { onChange: () => undefined });
    expect([opened.length, opened[0].closed, opened[1].closed, down]).toEqual([2, true, false, []]);
  });
});

describe("useResource with live", () => {
  beforeEach(() => vi.useFakeTimers({ toFake: ["setTimeout", "clearTimeout", "setInterval", "clearInterval", "Date"] }));
  afterEach(() => {
    changes.close();
    vi.useRealTimers();
    vi.unstubAllGlobals();
  });

  const JOBS = /^GET \/api\/v1\/jobs/;
  const RUNS = /^GET \/api\/v1\/runs/;
  const advance = (ms: number) => elapse(ms, act);

  function render() {
    return renderHook(() => {
      const jobs = useResource((s) => fetch("/api/v1/jobs", { signal: s }).then((r) => r.json()), [],
        { live: ["jobs", "groups"], pollMs: 1000 });
      const runs = useResource((s) => fetch("/api/v1/runs", { signal: s }).then((r) => r.json()), [],
        { live: ["runs"], pollMs: 1000 });
      return { jobs, runs };
    });
  }

  it("refetches on its topics and ready only, asks nothing on a timer while the stream is up, polls while it is down", async () => {
    let version = 0;
    const w = wire(/\/changes\/stream$/, () => ({ version }));
    const { result, unmount } = render();
    await advance(0);
    expect(w.streams.map((s) => s.path)).toEqual(["/api/v1/changes/stream"]); // one stream for both
    expect([w.count(JOBS), w.count(RUNS)]).toEqual([1, 1]);

    w.streams[0].send("ready", { topics: ["groups", "jobs", "runs"] });
    await advance(0);
    expect([w.count(JOBS), w.count(RUNS)]).toEqual([1, 1]); // the first fetch began under a second ago
    await advance(1_000);
    expect([w.count(JOBS), w.count(RUNS)]).toEqual([2, 2]);
    await advance(30_000);
    expect([w.count(JOBS), w.count(RUNS)]).toEqual([2, 2]); // up: nothing on a timer

    version = 1;
    w.streams[0].send("changes", { topics: ["groups"] });
    await advance(0);
    expect([w.count(JOBS), w.count(RUNS)]).toEqual([3, 2]);
    expect(result.current.jobs.data).toEqual({ version: 1 });
    expect(result.current.runs.data).toEqual({ version: 0 });

    // A burst every 250 ms: the first fetched at once, then at most one a second.
    await advance(5_000);
    for (let i = 0; i < 5; i++) {
      w.streams[0].send("changes", { topics: ["jobs"] });
      await advance(250);
    }
    expect(w.count(JOBS)).toBe(5); // at 0 and 1000 ms; the one sent at 1000 ms waits for 2000
    await advance(5_000);
    expect(w.count(JOBS)).toBe(6);

    // Down: both poll every pollMs.
    w.refuse = true;
    w.streams[0].end();
    await advance(5_000);
    expect(w.count(JOBS)).toBeGreaterThanOrEqual(9);
    expect(w.count(RUNS)).toBeGreaterThanOrEqual(5);

    // Back: ready fetches each once more, then nothing on a timer.
    w.refuse = false;
    await advance(20_000);
    expect(w.streams.length).toBe(2);
    w.streams[1].send("ready", { topics: ["groups", "jobs", "runs"] });
    await advance(1_000);
    const back = [w.count(JOBS), w.count(RUNS)];
    await advance(30_000);
    expect([w.count(JOBS), w.count(RUNS)]).toEqual(back);

    unmount();
    await advance(5_000);
    expect(changes.following).toBe(false); // the last subscriber left: the stream is closed
  });

  it("asks nothing while the tab is hidden, and once when it shows if something changed meanwhile", async () => {
    const w = wire(/\/changes\/stream$/, () => ({}));
    const { unmount } = render();
    await advance(0);
    w.streams[0].send("ready", { topics: ["groups", "jobs", "runs"] });
    await advance(2_000);
    const shown = w.count(JOBS);
    const visibility = vi.spyOn(document, "visibilityState", "get").mockReturnValue("hidden");
    for (let i = 0; i < 10; i++) {
      w.streams[0].send("changes", { topics: ["jobs"] });
      await advance(1_000);
    }
    expect(w.count(JOBS)).toBe(shown); // a background tab: nothing asked
    visibility.mockReturnValue("visible");
    document.dispatchEvent(new Event("visibilitychange"));
    await advance(0);
    expect(w.count(JOBS)).toBe(shown + 1); // once, for all ten
    await advance(10_000);
    expect(w.count(JOBS)).toBe(shown + 1);
    expect(w.count(RUNS)).toBe(2); // its topic never changed
    visibility.mockRestore();
    unmount();
  });

  it("polls a daemon that refuses the stream, and without live polls as before", async () => {
    const w = wire(/\/changes\/stream$/, () => ({}));
    vi.stubGlobal("fetch", vi.fn(async (input: string) => {
      const url = new URL(input, "http://daemon");
      w.calls.push(`GET ${url.pathname}`);
      if (url.pathname.endsWith("/changes/stream")) return new Response("{}", { status: 404 });
      return new Response("{}", { status: 200, headers: { "content-type": "application/json" } });
    }));
    const { unmount } = render();
    await advance(5_000);
    expect(w.count(/changes\/stream/)).toBe(1); // refused for good: not asked again
    expect(w.count(JOBS)).toBeGreaterThanOrEqual(5);
    unmount();

    const plain = renderHook(() => useResource((s) => fetch("/api/v1/nodes", { signal: s }), [], { pollMs: 1000 }));
    await advance(5_000);
    expect(w.count(/\/nodes/)).toBeGreaterThanOrEqual(5);
    plain.unmount();
  });
});
