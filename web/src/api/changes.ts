// What the daemon committed, as topics, on GET /changes/stream: one stream for the whole page,
// opened when the first resource subscribes and closed shortly after the last one leaves (the
// linger keeps it across a page change, whose old page unsubscribes just before the new one
// subscribes). A subscriber is told to refetch when a `changes` event names one of its topics,
// and on every `ready` (what changed before the stream opened, or while it was reconnecting);
// it polls only while it is "down": the stream reconnecting or refused, or not carrying any of
// its topics for this caller. While the tab is hidden nobody is told; each subscriber a change
// concerned is told once when the tab shows.

import type { components } from "./openapi";
import { streamDown } from "./pushedByStream";
import { EventStream, type SSEMessage, type StreamOptions, type StreamState } from "./sse";

/** The daemon's topic names (GET /changes/stream, from its OpenAPI document); refetches are keyed on these exactly. */
export type Topic = components["schemas"]["ChangedTopics"]["topics"][number];

export interface ChangeSubscriber {
  /** Refetch: a change named one of the topics, or the stream (re)opened. */
  onChange: () => void;
  /** Whether the stream can't be relied on for these topics (poll meanwhile). Called on every change of it. */
  onDown?: (down: boolean) => void;
}

interface Subscription extends ChangeSubscriber {
  topics: readonly string[];
  down: boolean;
  unseen: boolean; // told of a change while the tab was hidden: told once it shows
}

type OpenStream = (onMessage: (m: SSEMessage) => void, onState: (s: StreamState) => void) => { close(): void };

export interface ChangesFeedOptions {
  /** How long the stream stays open after its last subscriber left. */
  lingerMs?: number;
  /** Opens the stream (tests pass their own; EventStream on /changes/stream otherwise). */
  open?: OpenStream;
  streamOptions?: Partial<Omit<StreamOptions, "onMessage" | "onState" | "path">>;
}

export const CHANGES_LINGER_MS = 2000;

export class ChangesFeed {
  private readonly subs = new Set<Subscription>();
  private stream: { close(): void } | null = null;
  private closeTimer: ReturnType<typeof setTimeout> | null = null;
  private readonly lingerMs: number;
  private readonly open: OpenStream;
  /** The topics this caller hears (from the last `ready`); null until one came. */
  heard: ReadonlySet<string> | null = null;
  state: StreamState = "closed";

  constructor(options: ChangesFeedOptions = {}) {
    this.lingerMs = options.lingerMs ?? CHANGES_LINGER_MS;
    this.open = options.open ?? ((onMessage, onState) =>
      new EventStream({ ...options.streamOptions, path: "/changes/stream", onMessage, onState }));
  }

  /** Whether a stream is held (open, opening, or reconnecting). */
  get following(): boolean {
    return this.stream !== null;
  }

  /** Follow `topics`; returns the unsubscribe. */
  subscribe(topics: readonly string[], subscriber: ChangeSubscriber): () => void {
    const sub: Subscription = { ...subscriber, topics, down: false, unseen: false };
    // A refused stream kept by the linger is tried afresh by the next page (a 401 led to sign-in since).
    if (!this.subs.size && this.state === "failed") this.close();
    this.subs.add(sub);
    if (this.closeTimer !== null) clearTimeout(this.closeTimer);
    this.closeTimer = null;
    if (!this.stream) {
      this.state = "connecting";
      this.heard = null;
      this.stream = this.open((m) => this.onMessage(m), (s) => this.onState(s));
      if (typeof document !== "undefined") document.addEventListener("visibilitychange", this.onVisible);
    }
    this.tell(sub);
    return () => {
      if (!this.subs.delete(sub) || this.subs.size) return;
      this.closeTimer = setTimeout(() => this.close(), this.lingerMs);
    };
  }

  /** Close the stream now, whoever still follows it (they are told it is down). */
  close(): void {
    if (this.closeTimer !== null) clearTimeout(this.closeTimer);
    this.closeTimer = null;
    const stream = this.stream;
    this.stream = null;
    stream?.close();
    if (typeof document !== "undefined") document.removeEventListener("visibilitychange", this.onVisible);
    this.state = "closed";
    this.heard = null;
  }

  private onState(state: StreamState): void {
    if (!this.stream) return;
    this.state = state;
    for (const sub of [...this.subs]) this.tell(sub);
  }

  private onMessage(message: SSEMessage): void {
    let topics: unknown;
    try {
      topics = (JSON.parse(message.data) as { topics?: unknown }).topics;
    } catch {
      return; // not ours to act on; the next event or ready still comes
    }
    if (!Array.isArray(topics)) return;
    if (message.event === "ready") {
      this.heard = new Set(topics.map(String));
      for (const sub of [...this.subs]) {
        this.tell(sub);
        this.change(sub);
      }
    } else if (message.event === "changes") {
      const changed = new Set(topics.map(String));
      for (const sub of [...this.subs]) if (sub.topics.some((t) => changed.has(t))) this.change(sub);
    }
  }

  /** A tab in the background asks nothing: what changed meanwhile is told once, when it shows. */
  private change(sub: Subscription): void {
    if (typeof document !== "undefined" && document.visibilityState === "hidden") sub.unseen = true;
    else sub.onChange();
  }

  private readonly onVisible = (): void => {
    if (document.visibilityState !== "visible") return;
    for (const sub of [...this.subs]) {
      if (!sub.unseen) continue;
      sub.unseen = false;
      sub.onChange();
    }
  };

  private downFor(sub: Subscription): boolean {
    if (streamDown(this.state)) return true;
    return this.heard !== null && !sub.topics.some((t) => this.heard!.has(t));
  }

  private tell(sub: Subscription): void {
    const down = this.downFor(sub);
    if (down === sub.down) return;
    sub.down = down;
    sub.onDown?.(down);
  }
}

/** The page's one feed. */
export const changes = new ChangesFeed();
