// A scripted daemon for the UI's live-by-push tests: `fetch` answered by path, each SSE stream
// a body the test writes events into, ends, or refuses; every request is counted, so a test
// can say that nothing asked on a timer while a stream was up.

import { vi } from "vitest";


export class WiredStream {
  private controller: ReadableStreamDefaultController<Uint8Array> | null = null;

  constructor(readonly path: string) {}

  response(signal?: AbortSignal | null): Response {
    const body = new ReadableStream<Uint8Array>({
      start: (controller) => {
        this.controller = controller;
        signal?.addEventListener("abort", () => controller.error(new DOMException("aborted", "AbortError")));
      },
    });
    return new Response(body, { status: 200, headers: { "content-type": "text/event-stream" } });
  }

  send(event: string, data: unknown, id?: string): void {
    const text = `${id ? `id: ${id}\n` : ""}event: ${event}\ndata: ${JSON.stringify(data)}\n\n`;
    this.controller?.enqueue(new TextEncoder().encode(text));
  }

  /** The daemon ends it (a restart): the client reconnects after its backoff. */
  end(): void {
    this.controller?.close();
    this.controller = null;
  }
}

export interface Wire {
  /** Every request, as "METHOD /path?query". */
  calls: string[];
  /** The streams opened, newest last. */
  streams: WiredStream[];
  /** While true, a stream request is refused (a network error: the client keeps retrying). */
  refuse: boolean;
  count(pattern: RegExp): number;
}

/** Stub the global fetch: paths matching `stream` open a WiredStream; the rest are answered by `reply` (JSON). */
export function wire(stream: RegExp, reply: (path: string, url: URL, body: unknown) => unknown): Wire {
  const w: Wire = {
    calls: [], streams: [], refuse: false,
    count: (pattern) => w.calls.filter((c) => pattern.test(c)).length,
  };
  vi.stubGlobal("fetch", vi.fn(async (input: string, init: RequestInit = {}) => {
    const url = new URL(input, "http://daemon");
    w.calls.push(`${init.method ?? "GET"} ${url.pathname}${url.search}`);
    if (stream.test(url.pathname)) {
      if (w.refuse) throw new TypeError("Failed to fetch");
      const s = new WiredStream(url.pathname + url.search);
      w.streams.push(s);
      return s.response(init.signal);
    }
    const body = typeof init.body === "string" ? JSON.parse(init.body) : undefined;
    return new Response(JSON.stringify(reply(url.pathname, url, body)), { status: 200,
      headers: { "content-type": "application/json" } });
  }));
  return w;
}

// A real macrotask (timers are faked): lets the stubbed responses' reads complete.
const nextTask = (globalThis as unknown as { setImmediate: (fn: () => void) => void }).setImmediate;

export async function settle(): Promise<void> {
  for (let i = 0; i < 5; i++) {
    for (let j = 0; j < 20; j++) await Promise.resolve();
    await new Promise<void>((r) => nextTask(r));
  }
}

/**
 * `ms` of faked time, in steps that let each stubbed response land before the next timer, each
 * step in its own `act` (React renders and runs effects only when an act ends).
 */
export async function elapse(ms: number, act: (fn: () => Promise<void>) => Promise<unknown>, step = 250): Promise<void> {
  await act(settle);
  for (let t = 0; t < ms; t += step) {
    await act(async () => {
      await vi.advanceTimersByTimeAsync(Math.min(step, ms - t));
      await settle();
    });
  }
}
