// The table follows its runs by push, never by a timer: while any of them runs, the events
// stream is followed, and an event about one of them (its end, a checkpoint, a warning) or a
// run starting (a sweep's next trial) loads the table again, at most once per REFRESH_MS.

import { useEffect, useMemo, useRef } from "react";
import { useEventStream } from "../api/hooks";
import type { GpuEvent } from "../api/types";
import { throttle } from "../lib/throttle";

export const REFRESH_MS = 5000;

/** Whether an event may change what the table shows. */
export function concernsRuns(event: Pick<GpuEvent, "type" | "run_id">, runIds: ReadonlySet<string>): boolean {
  if (event.type === "RUN_STARTED") return true;
  return event.run_id !== null && runIds.has(event.run_id);
}

export function useLiveRefresh(runIds: ReadonlySet<string>, live: boolean, reload: () => void): void {
  const refresh = useMemo(() => throttle(reload, REFRESH_MS), [reload]);
  useEffect(() => () => refresh.cancel(), [refresh]);
  const ids = useRef(runIds);
  ids.current = runIds;
  useEventStream(live ? "experiments-runs" : null, { path: "/events/stream" }, (m) => {
    if (m.event !== "event") return;
    try {
      if (concernsRuns(JSON.parse(m.data) as GpuEvent, ids.current)) refresh.call();
    } catch {
      // A malformed event changes nothing here.
    }
  });
}
