// The workspace's panel grid: one panel per metric, the ★ primary metric first, every run
// overlaid in its stable colour (or, grouped, one band per group), the crosshair synced
// across panels, the runs' warnings, criticals and checkpoints marked on the x axis, and
// live runs followed on one stream of several runs, their points in its events. Panels in
// view load first (panelLoader.ts).

import { useEffect, useMemo, useRef, useState } from "react";
import { api } from "../../api/client";
import type { GpuEvent } from "../../api/types";
import { MetricPanel } from "../../charts/MetricPanel";
import type { RunHighlight } from "../../charts/highlight";
import { brushDrag } from "./brushDrag";
import { ErrorBanner } from "../../components/ui";
import { compareMarks } from "../../lib/marks";
import { useTheme } from "../../lib/theme";
import { groupRuns } from "./bands";
import { BandPanel } from "./BandPanel";
import { usePanelsLoader } from "./panelLoader";

export interface PanelRunSpec {
  id: string;
  label: string;
  color: string;
  group?: string;
}

export interface ExperimentPanelsProps {
  runs: PanelRunSpec[];
  /** The metrics to draw, the primary first. */
  metrics: string[];
  x: "step" | "ts";
  smooth: number;
  zoom: [number, number] | null;
  onZoom: (r: [number, number] | null) => void;
  /** The runs still producing points. */
  live: string[];
  /** Draw one band per group (min..max around the mean, in the group's colour) instead of every run. */
  groups: boolean;
  /** The primary metric, starred (it should be metrics[0]). */
  primary?: string | null;
  /** Beside each panel's title: a control for that metric (the page's primary-metric star). */
  headExtra?: (metric: string) => React.ReactNode;
  /** Events per run are read for at most this many runs (the first ones). */
  maxEventRuns?: number;
  /** Called each time points of a live run land (often: the caller throttles what it does). */
  onPoints?: () => void;
  /** The run the page points at (the parallel coordinates, the scatter, the table): stressed on the line charts. */
  highlight?: RunHighlight;
}

const SYNC_KEY = "experiments";
const EVENT_REFRESH_MS = 15_000;
const EVENT_FETCHES_AT_ONCE = 4;

/** The runs the panels draw: a new set only once it has held still this long (a brush drag changes it every frame). */
export const RUNS_SETTLE_MS = 150;

/** `runs` after it stopped changing for `ms` (the first set at once); equal sets keep their identity. */
export function useSettledRuns(runs: PanelRunSpec[], ms = RUNS_SETTLE_MS): PanelRunSpec[] {
  const key = runs.map((r) => `${r.id}\u0001${r.color}\u0001${r.label}\u0001${r.group ?? ""}`).join("\u0002");
  const [settled, setSettled] = useState({ key, runs });
  const latest = useRef(runs);
  latest.current = runs;
  useEffect(() => {
    if (key === settled.key) return;
    let timer: ReturnType<typeof setTimeout> | undefined;
    let unlisten: (() => void) | undefined;
    // Held still `ms`, and no brush being dragged (else again `ms` after the drag ends).
    const arm = () => {
      unlisten?.();
      unlisten = undefined;
      timer = setTimeout(() => {
        if (brushDrag.active) unlisten = brushDrag.onEnd(arm);
        else setSettled({ key, runs: latest.current });
      }, ms);
    };
    arm();
    return () => {
      clearTimeout(timer);
      unlisten?.();
    };
  }, [key, settled.key, ms]);
  return settled.runs;
}

export function ExperimentPanels({ runs: asked, metrics, x, smooth, zoom, onZoom, live, groups, primary = null, headExtra,
  maxEventRuns = 50, onPoints: onLivePoints, highlight }: ExperimentPanelsProps) {
  const { theme } = useTheme();
  const runs = useSettledRuns(asked);
  const ids = useMemo(() => runs.map((r) => r.id), [runs]);
  const [eventsTick, setEventsTick] = useState(0);
  const lastEvents = useRef(0);
  // Marks follow live runs: their streams' announcements refresh the events, at most every 15 s (no timer).
  const onPoints = () => {
    onLivePoints?.();
    const now = Date.now();
    if (now - lastEvents.current < EVENT_REFRESH_MS) return;
    lastEvents.current = now;
    setEventsTick((t) => t + 1);
  };
  const loader = usePanelsLoader({ runs: ids, metrics, x, zoom, live, onPoints });
  const firstLoaded = loader.loaded.size > 0;
  const events = useRunEvents(ids.slice(0, maxEventRuns), firstLoaded, eventsTick);
  const colors = useMemo(() => new Map(runs.map((r) => [r.id, r.color])), [runs]);
  const labels = useMemo(() => new Map(runs.map((r) => [r.id, r.label])), [runs]);
  const marks = useMemo(() => compareMarks(events, colors, labels, x), [events, colors, labels, x]);
  const panelRuns = useMemo(() => runs.map(({ id, label, color }) => ({ id, label, color })), [runs]);
  const bandGroups = useMemo(() => groupRuns(runs), [runs]);

  if (!runs.length || !metrics.length) return null;
  return (
    <div className="viz-panels" data-loaded={loader.loaded.size} data-metrics={metrics.length}>
      <ErrorBanner error={loader.error} />
      <div className="chart-grid">
        {metrics.map((name) => {
          const star = name === primary ? <span className="viz-star" role="img" aria-label="Primary metric" title="Primary metric">★</span> : null;
          const extra = headExtra?.(name);
          return (
            <PanelSlot key={name} name={name} onSeen={loader.seen}>
              {groups ? (
                <BandPanel store={loader.store(name)} name={name} groups={bandGroups} smoothing={smooth} xMode={x} zoom={zoom}
                  onZoom={onZoom} syncKey={SYNC_KEY} theme={theme} marks={marks} title={<>{star}{name}</>} headExtra={extra} />
              ) : (
                <MetricPanel store={loader.store(name)} name={name} runs={panelRuns} smoothing={smooth} xMode={x} zoom={zoom}
                  onZoom={onZoom} syncKey={SYNC_KEY} theme={theme} marks={marks} highlight={highlight}
                  headExtra={star || extra ? <>{star}{extra}</> : undefined} />
              )}
            </PanelSlot>
          );
        })}
      </div>
      {loader.loading && <div className="loading-line" aria-hidden="true" />}
    </div>
  );
}

/** A panel's place in the grid, telling the loader whether it is in view. */
function PanelSlot({ name, onSeen, children }: { name: string; onSeen: (metric: string, visible: boolean) => void;
  children: React.ReactNode }) {
  const el = useRef<HTMLDivElement>(null);
  useEffect(() => {
    const node = el.current;
    if (!node || typeof IntersectionObserver === "undefined") return;
    const observer = new IntersectionObserver((entries) => {
      for (const e of entries) onSeen(name, e.isIntersecting);
    }, { rootMargin: "100px" });
    observer.observe(node);
    return () => observer.disconnect();
  }, [name, onSeen]);
  return <div ref={el} className="viz-panel-slot" data-metric={name}>{children}</div>;
}

/** Each run's events (for the marks), read a few runs at a time once the first charts are in. */
function useRunEvents(ids: readonly string[], ready: boolean, tick: number): Map<string, GpuEvent[]> {
  const [events, setEvents] = useState<Map<string, GpuEvent[]>>(() => new Map());
  const key = ids.join(",");
  useEffect(() => {
    if (!ready || !ids.length) return;
    const abort = new AbortController();
    const out = new Map<string, GpuEvent[]>();
    const queue = [...ids];
    const worker = async () => {
      for (let id = queue.shift(); id !== undefined; id = queue.shift()) {
        try {
          const page = await api.listEvents({ run_id: id, limit: 200 }, abort.signal);
          out.set(id, page.events);
        } catch (e) {
          if ((e as Error).name === "AbortError") return;
        }
      }
    };
    void Promise.all(Array.from({ length: Math.min(EVENT_FETCHES_AT_ONCE, ids.length) }, worker)).then(() => {
      if (!abort.signal.aborted) setEvents(out);
    });
    return () => abort.abort();
  }, [key, ready, tick]); // eslint-disable-line react-hooks/exhaustive-deps
  return events;
}
