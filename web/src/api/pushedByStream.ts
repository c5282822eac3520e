// What follows a stream and polls only while it is down: the stream's state says when (a
// stream reconnecting or refused is down; connecting, open, paused with the tab or closed
// is not), and what it brings asks for refreshes, at most one per key and period.

import { useEffect, useMemo, useRef } from "react";
import { throttle, type Throttled } from "../lib/throttle";
import type { StreamState } from "./sse";

/** Reconnecting, or refused (a daemon without it): what the stream would bring is polled for meanwhile. */
export function streamDown(state: StreamState | null | undefined): boolean {
  return state === "reconnecting" || state === "failed";
}

/** Refreshes asked for by a stream: each key at most once per `ms`, the first at once, a burst folded into one more. */
export class KeyedThrottle {
  private readonly each = new Map<string, Throttled>();
  constructor(private readonly fn: (key: string) => void, private readonly ms: number) {}

  call(key: string): void {
    let t = this.each.get(key);
    if (!t) {
      t = throttle(() => this.fn(key), this.ms);
      this.each.set(key, t);
    }
    t.call();
  }

  cancel(): void {
    for (const t of this.each.values()) t.cancel();
    this.each.clear();
  }
}

/**
 * `reload` once per change of `pushes` (a count of what the stream brought that may change the
 * resource), at most once per `ms`; nothing for the first value. Cancelled with the component.
 */
export function useReloadOnPush(pushes: number, reload: () => void, ms: number): void {
  const reloadRef = useRef(reload);
  reloadRef.current = reload;
  const throttled = useMemo(() => throttle(() => reloadRef.current(), ms), [ms]);
  const seen = useRef(pushes);
  useEffect(() => {
    if (pushes === seen.current) return;
    seen.current = pushes;
    throttled.call();
  }, [pushes, throttled]);
  useEffect(() => () => throttled.cancel(), [throttled]);
}
