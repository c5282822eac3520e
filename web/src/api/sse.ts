// Server-Sent Events over fetch: the parser is pure (feed text, get messages); the client
// adds what EventSource lacks: exponential backoff with jitter, the HTTP status (a 401
// goes to sign-in, a 404 stops instead of retrying forever), resuming with Last-Event-ID
// on every reconnect, and pausing while the tab is hidden (browsers allow six HTTP/1.1
// connections per origin, shared by all tabs).

import { API, buildQuery, errorFrom, notifyUnauthorized, type ApiError } from "./client";

export interface SSEMessage {
  event: string;
  data: string;
  id: string | null;
}

/** The WHATWG event-stream grammar, fed in arbitrary chunks. */
export class SSEParser {
  private buffer = "";
  private data: string[] = [];
  private event = "";
  private sawCR = false;
  lastEventId: string | null = null;
  retryMs: number | null = null;

  feed(chunk: string): SSEMessage[] {
    const out: SSEMessage[] = [];
    let text = chunk;
    if (this.sawCR && text.startsWith("\n")) text = text.slice(1); // the "\n" of a "\r\n" split across chunks
    this.sawCR = false;
    this.buffer += text;
    let start = 0;
    for (let i = 0; i < this.buffer.length; i++) {
      const c = this.buffer.charCodeAt(i);
      if (c !== 10 && c !== 13) continue;
      const line = this.buffer.slice(start, i);
      if (c === 13) {
        if (i + 1 < this.buffer.length) {
          if (this.buffer.charCodeAt(i + 1) === 10) i++;
        } else {
          this.sawCR = true;
        }
      }
      start = i + 1;
      const message = this.line(line);
      if (message) out.push(message);
    }
    this.buffer = this.buffer.slice(start);
    return out;
  }

  private line(line: string): SSEMessage | null {
    if (line === "") {
      if (!this.data.length) {
        this.event = "";
        return null;
      }
      const message = { event: this.event || "message", data: this.data.join("\n"), id: this.lastEventId };
      this.data = [];
      this.event = "";
      return message;
    }
    if (line.startsWith(":")) return null;
    const colon = line.indexOf(":");
    const field = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? "" : line.slice(colon + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    switch (field) {
      case "data":
        this.data.push(value);
        break;
      case "event":
        this.event = value;
        break;
      case "id":
        if (!value.includes("\0")) this.lastEventId = value;
        break;
      case "retry":
        if (/^\d+$/.test(value)) this.retryMs = Number(value);
        break;
    }
    return null;
  }
}

export interface Backoff {
  baseMs: number;
  maxMs: number;
  factor: number;
  /** 0..1: how much of each delay is random (spreads reconnects of many tabs). */
  jitter: number;
}

export const DEFAULT_BACKOFF: Backoff = { baseMs: 500, maxMs: 30_000, factor: 2, jitter: 0.2 };

/** The delay before reconnect number `attempt` (0-based). */
export function backoffDelay(attempt: number, backoff: Backoff = DEFAULT_BACKOFF, random = Math.random): number {
  const raw = Math.min(backoff.maxMs, backoff.baseMs * Math.pow(backoff.factor, Math.max(0, attempt)));
  return Math.round(raw * (1 - backoff.jitter + backoff.jitter * random()));
}

export type StreamState = "connecting" | "open" | "reconnecting" | "paused" | "closed" | "failed";

export interface StreamOptions {
  /** Path under /api/v1, e.g. "/events/stream". */
  path: string;
  query?: Record<string, string | number | undefined | null | readonly string[]>;
  onMessage: (message: SSEMessage) => void;
  onState?: (state: StreamState, error?: ApiError | Error) => void;
  /** Resume from here on the first connection (later ones use the last id received). */
  lastEventId?: string | null;
  backoff?: Backoff;
  pauseWhenHidden?: boolean;
  fetchImpl?: typeof fetch;
  random?: () => number;
}

/** One followed stream. `close()` stops it for good. */
export class EventStream {
  private readonly options: StreamOptions;
  private readonly parser = new SSEParser();
  private abort: AbortController | null = null;
  private timer: ReturnType<typeof setTimeout> | null = null;
  private attempts = 0;
  private stopped = false;
  private paused = false;
  state: StreamState = "connecting";

  constructor(options: StreamOptions) {
    this.options = options;
    this.parser.lastEventId = options.lastEventId ?? null;
    if (options.pauseWhenHidden !== false && typeof document !== "undefined") {
      document.addEventListener("visibilitychange", this.onVisibility);
    }
    void this.connect();
  }

  get lastEventId(): string | null {
    return this.parser.lastEventId;
  }

  close(): void {
    this.stopped = true;
    this.clear();
    if (typeof document !== "undefined") document.removeEventListener("visibilitychange", this.onVisibility);
    this.setState("closed");
  }

  private onVisibility = (): void => {
    if (this.stopped) return;
    if (document.visibilityState === "hidden") {
      this.paused = true;
      this.clear();
      this.setState("paused");
    } else if (this.paused) {
      this.paused = false;
      this.attempts = 0;
      void this.connect();
    }
  };

  private clear(): void {
    if (this.timer !== null) clearTimeout(this.timer);
    this.timer = null;
    this.abort?.abort();
    this.abort = null;
  }

  private setState(state: StreamState, error?: ApiError | Error): void {
    this.state = state;
    this.options.onState?.(state, error);
  }

  private async connect(): Promise<void> {
    if (this.stopped || this.paused) return;
    const abort = new AbortController();
    this.abort = abort;
    this.setState(this.attempts ? "reconnecting" : "connecting");
    const headers: Record<string, string> = { Accept: "text/event-stream" };
    if (this.parser.lastEventId !== null) headers["Last-Event-ID"] = this.parser.lastEventId;
    const fetchImpl = this.options.fetchImpl ?? fetch;
    try {
      const response = await fetchImpl(API + this.options.path + buildQuery(this.options.query), {
        headers,
        credentials: "same-origin",
        cache: "no-store",
        signal: abort.signal,
      });
      if (!response.ok) {
        const error = await errorFrom(response);
        if (response.status === 401) {
          notifyUnauthorized();
          this.fail(error);
          return;
        }
        // Retrying a request the daemon refuses (400, 403, 404) would only repeat it.
        if (response.status >= 400 && response.status < 500 && response.status !== 408 && response.status !== 429) {
          this.fail(error);
          return;
        }
        throw error;
      }
      if (!response.body) throw new Error("the response has no body");
      this.setState("open");
      const reader = response.body.getReader();
      const decoder = new TextDecoder();
      for (;;) {
        const { done, value } = await reader.read();
        if (done) break;
        const messages = this.parser.feed(decoder.decode(value, { stream: true }));
        if (messages.length) this.attempts = 0; // a stream that delivers is a healthy one
        for (const message of messages) {
          if (this.stopped || abort.signal.aborted) return;
          this.options.onMessage(message);
        }
      }
      if (!this.stopped && !abort.signal.aborted) this.retry(new Error("the stream ended"));
    } catch (error) {
      if (this.stopped || abort.signal.aborted) return;
      this.retry(error as Error);
    }
  }

  private fail(error: ApiError): void {
    this.stopped = true;
    this.clear();
    this.setState("failed", error);
  }

  private retry(error: Error): void {
    if (this.stopped || this.paused) return;
    const delay = this.parser.retryMs !== null && this.attempts === 0
      ? this.parser.retryMs
      : backoffDelay(this.attempts, this.options.backoff, this.options.random);
    this.attempts++;
    this.setState("reconnecting", error);
    this.timer = setTimeout(() => {
      this.timer = null;
      void this.connect();
    }, delay);
  }
}
