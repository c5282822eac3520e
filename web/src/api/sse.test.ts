import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { onUnauthorized } from "./client";
import { backoffDelay, EventStream, SSEParser, type SSEMessage, type StreamState } from "./sse";

describe("SSEParser", () => {
  it("parses events split across arbitrary chunks", () => {
    const p = new SSEParser();
    const text = "id: 7\nevent: stdout\ndata: hello\n\n: keep-alive\n\ndata: a\ndata: b\n\n";
    const out: SSEMessage[] = [];
    for (const ch of text) out.push(...p.feed(ch));
    expect(out).toEqual([
      { event: "stdout", data: "hello", id: "7" },
      { event: "message", data: "a\nb", id: "7" }, // the id sticks until a new one comes
    ]);
    expect(p.lastEventId).toBe("7");
  });

  it("accepts CRLF and CR line endings, even with CRLF split between chunks", () => {
    const p = new SSEParser();
    const out = [...p.feed("data: x\r"), ...p.feed("\n\r\n"), ...p.feed("data: y\r\r")];
    expect(out.map((m) => m.data)).toEqual(["x", "y"]);
  });

  it("reads retry and ignores unknown fields and ids with NUL", () => {
    const p = new SSEParser();
    p.feed("retry: 1500\nfoo: bar\nid: a\0b\ndata:no-space\n\n");
    expect(p.retryMs).toBe(1500);
    expect(p.lastEventId).toBeNull();
  });
});

describe("backoffDelay", () => {
  it("doubles up to the cap, with jitter below the nominal delay", () => {
    const max = () => 1;
    expect([0, 1, 2, 3].map((a) => backoffDelay(a, undefined, max))).toEqual([500, 1000, 2000, 4000]);
    expect(backoffDelay(20, undefined, max)).toBe(30_000);
    expect(backoffDelay(1, undefined, () => 0)).toBe(800); // 20 % jitter at most
  });
});

// A fetch whose responses the test scripts: each call takes the next entry.
type Script = { status: number; chunks?: string[]; end?: boolean } | Error;

function fakeFetch(script: Script[]) {
  const calls: { headers: Record<string, string>; url: string }[] = [];
  const fn = vi.fn(async (url: string, init: RequestInit) => {
    calls.push({ url, headers: { ...(init.headers as Record<string, string>) } });
    const step = script.shift() ?? { status: 200, chunks: [], end: false };
    if (step instanceof Error) throw step;
    if (step.status !== 200) {
      return new Response(JSON.stringify({ error: { code: "x", message: `status ${step.status}`, details: {} } }),
        { status: step.status });
    }
    const body = new ReadableStream<Uint8Array>({
      start(controller) {
        for (const c of step.chunks ?? []) controller.enqueue(new TextEncoder().encode(c));
        if (step.end !== false) controller.close();
        init.signal?.addEventListener("abort", () => controller.error(new DOMException("aborted", "AbortError")));
      },
    });
    return new Response(body, { status: 200 });
  });
  return { fn: fn as unknown as typeof fetch, calls };
}

// A real macrotask (setTimeout is faked): lets the fake response's stream reads complete.
const nextTask = (globalThis as unknown as { setImmediate: (fn: () => void) => void }).setImmediate;

async function settle() {
  for (let i = 0; i < 30; i++) await Promise.resolve();
  await new Promise<void>((r) => nextTask(r));
}

describe("EventStream reconnects", () => {
  beforeEach(() => vi.useFakeTimers({ toFake: ["setTimeout", "clearTimeout"] }));
  afterEach(() => vi.useRealTimers());

  it("reconnects after the backoff and resumes with Last-Event-ID", async () => {
    const { fn, calls } = fakeFetch([
      { status: 200, chunks: ["id: 5\nevent: event\ndata: {\"n\":1}\n\n"] },
      { status: 200, chunks: ["id: 6\nevent: event\ndata: {\"n\":2}\n\n"], end: false },
    ]);
    const messages: SSEMessage[] = [];
    const states: StreamState[] = [];
    const s = new EventStream({ path: "/events/stream", query: { severity: "warning" }, onMessage: (m) => messages.push(m),
      onState: (st) => states.push(st), fetchImpl: fn, random: () => 1, pauseWhenHidden: false });
    await settle();
    expect(messages.map((m) => m.data)).toEqual(['{"n":1}']);
    expect(calls[0].url).toBe("/api/v1/events/stream?severity=warning");
    expect(calls[0].headers["Last-Event-ID"]).toBeUndefined();
    expect(states).toContain("reconnecting");

    // A delivering stream resets the attempts: the first retry waits the base delay.
    await vi.advanceTimersByTimeAsync(499);
    expect(calls).toHaveLength(1);
    await vi.advanceTimersByTimeAsync(1);
    await settle();
    expect(calls).toHaveLength(2);
    expect(calls[1].headers["Last-Event-ID"]).toBe("5");
    expect(messages.map((m) => m.id)).toEqual(["5", "6"]);
    expect(s.state).toBe("open");
    s.close();
  });

  it("backs off exponentially while the daemon is unreachable", async () => {
    const { fn, calls } = fakeFetch([new TypeError("down"), new TypeError("down"), new TypeError("down"),
      { status: 503 }, { status: 200, chunks: [], end: false }]);
    const s = new EventStream({ path: "/x", onMessage: () => undefined, fetchImpl: fn, random: () => 1,
      pauseWhenHidden: false, lastEventId: "41" });
    await settle();
    expect(calls).toHaveLength(1);
    for (const [wait, total] of [[500, 2], [1000, 3], [2000, 4], [4000, 5]] as const) {
      await vi.advanceTimersByTimeAsync(wait - 1);
      expect(calls).toHaveLength(total - 1);
      await vi.advanceTimersByTimeAsync(1);
      await settle();
      expect(calls).toHaveLength(total);
    }
    expect(calls.every((c) => c.headers["Last-Event-ID"] === "41")).toBe(true);
    expect(s.state).toBe("open");
    s.close();
  });

  it("stops for good on a 404 instead of retrying", async () => {
    const { fn, calls } = fakeFetch([{ status: 404 }]);
    let failure: Error | undefined;
    const s = new EventStream({ path: "/jobs/nope/logs/stream", onMessage: () => undefined, fetchImpl: fn,
      onState: (st, e) => { if (st === "failed") failure = e; }, pauseWhenHidden: false });
    await settle();
    await vi.advanceTimersByTimeAsync(120_000);
    expect(calls).toHaveLength(1);
    expect(s.state).toBe("failed");
    expect(failure?.message).toBe("status 404");
  });

  it("sends the user to sign in on a 401", async () => {
    const handler = vi.fn();
    onUnauthorized(handler);
    const { fn, calls } = fakeFetch([{ status: 401 }]);
    const s = new EventStream({ path: "/events/stream", onMessage: () => undefined, fetchImpl: fn, pauseWhenHidden: false });
    await settle();
    await vi.advanceTimersByTimeAsync(60_000);
    expect(handler).toHaveBeenCalledTimes(1);
    expect(calls).toHaveLength(1);
    expect(s.state).toBe("failed");
  });

  it("does not reconnect after close()", async () => {
    const { fn, calls } = fakeFetch([{ status: 200, chunks: ["data: x\n\n"] }]);
    const s = new EventStream({ path: "/x", onMessage: () => undefined, fetchImpl: fn, pauseWhenHidden: false });
    await settle();
    s.close();
    await vi.advanceTimersByTimeAsync(60_000);
    expect(calls).toHaveLength(1);
    expect(s.state).toBe("closed");
  });

  it("honours the server's retry field for the first reconnect", async () => {
    const { fn, calls } = fakeFetch([{ status: 200, chunks: ["retry: 3000\ndata: x\n\n"] }, { status: 200, end: false }]);
    const s = new EventStream({ path: "/x", onMessage: () => undefined, fetchImpl: fn, pauseWhenHidden: false, random: () => 1 });
    await settle();
    await vi.advanceTimersByTimeAsync(2999);
    expect(calls).toHaveLength(1);
    await vi.advanceTimersByTimeAsync(1);
    await settle();
    expect(calls).toHaveLength(2);
    s.close();
  });
});
