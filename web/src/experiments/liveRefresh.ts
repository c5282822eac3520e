// The table follows its runs by push, never by a timer: while any of them runs, the events
// stream is followed, and an event about one of them (its end, a checkpoint, a warning), a
// run starting (a sweep's next trial) or a live run's points on the panels' stream loads the
// table again, at most once per REFRESH_MS.

import { useCallback, useEffect, useMemo, useRef } from "react";
import { useEventStream } from "../api/hooks";
import type { GpuEvent } from "../api/types";
import { throttle } from "../lib/throttle";

export const REFRESH_MS = 5000;

/** Whether an event may change what the table shows. */
export function concernsRuns(event: Pick<GpuEvent, "type" | "run_id">, runIds: ReadonlySet<string>): boolean {
  if (event.type === "RUN_STARTED") return true;
  return event.run_id !== null && runIds.has(event.run_id);
}

/** Follows the events while `live`; returns the throttled reload, for the panels to call when a
 * live run's points arrive (the table's metric summaries move on between the runs' events). */
export function useLiveRefresh(runIds: ReadonlySet<string>, live: boolean, reload: () => void): () => void {
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
  return useCallback(() => refresh.call(), [refresh]);
}
