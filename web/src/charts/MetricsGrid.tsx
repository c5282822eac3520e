// The metric panels of a run (or of several, overlaid), grouped by prefix ("train/",
// "eval/"), with the toolbar that sets what they show: name filter, x axis, smoothing,
// log scale, and the zoom (drag on a chart; double-click or the chip to zoom out).

import { useEffect, useMemo, useState, type ReactNode } from "react";
import type { ApiError } from "../api/client";
import { Icon } from "../components/Icon";
import { Empty, ErrorBanner, Segmented } from "../components/ui";
import { fmtInt } from "../lib/format";
import { useTheme } from "../lib/theme";
import { fmtX, MetricPanel, type Mark, type XMode } from "./MetricPanel";
import type { PanelRun } from "./panelData";
import type { SeriesStore } from "./series";

export interface GridView {
  x: XMode;
  smooth: number;
  m: string;
  xr: [number, number] | null;
  logy: boolean;
}

export function useStoreNames(store: SeriesStore): string[] {
  const [names, setNames] = useState(() => store.names());
  useEffect(() => {
    setNames(store.names());
    return store.subscribeNames(() => setNames(store.names()));
  }, [store]);
  return names;
}

/** "train/*" style globs and plain substrings, comma-separated; empty matches everything. */
export function nameMatcher(filter: string): (name: string) => boolean {
  const parts = filter.split(",").map((s) => s.trim()).filter(Boolean);
  if (!parts.length) return () => true;
  const tests = parts.map((p) => {
    if (/[*?]/.test(p)) {
      const re = new RegExp(`^${p.replace(/[.+^${}()|[\]\\]/g, "\\$&").replace(/\*/g, ".*").replace(/\?/g, ".")}$`, "i");
      return (n: string) => re.test(n);
    }
    const q = p.toLowerCase();
    return (n: string) => n.toLowerCase().includes(q);
  });
  return (n) => tests.some((t) => t(n));
}

export function groupNames(names: readonly string[]): [string, string[]][] {
  const groups = new Map<string, string[]>();
  for (const n of names) {
    const slash = n.indexOf("/");
    const g = slash > 0 ? n.slice(0, slash) : "";
    const list = groups.get(g) ?? [];
    list.push(n);
    groups.set(g, list);
  }
  return [...groups.entries()].sort((a, b) => (a[0] === "" ? 1 : b[0] === "" ? -1 : a[0].localeCompare(b[0])));
}

/** The charts' toolbar: metric filter, x axis, smoothing, log y (where the view has it), the zoom
 * chip, and what the grid shows. */
export function GridToolbar<V extends Omit<GridView, "logy"> & { logy?: boolean }>({ view, setView, extra, names, width }: {
  view: V; setView: (p: Partial<V>) => void; extra?: ReactNode; names: number; width: number | null }) {
  const [draft, setDraft] = useState(view.smooth);
  useEffect(() => setDraft(view.smooth), [view.smooth]);
  return (
    <div className="toolbar chart-toolbar">
      <div className="search">
        <Icon name="search" size={14} />
        <input value={view.m} onChange={(e) => setView({ m: e.target.value } as Partial<V>)} placeholder="Metrics: loss, eval/*"
          aria-label="Filter metrics" />
      </div>
      <Segmented label="X axis" value={view.x} onChange={(x) => setView({ x, xr: null } as Partial<V>)}
        options={[{ id: "step", label: "Step" }, { id: "ts", label: "Time" }]} />
      <label className="slider" title="Exponential moving average (debiased, as TensorBoard)">
        <span>Smoothing</span>
        <input type="range" min={0} max={0.99} step={0.01} value={draft} onChange={(e) => setDraft(Number(e.target.value))}
          onPointerUp={() => setView({ smooth: draft } as Partial<V>)} onKeyUp={() => setView({ smooth: draft } as Partial<V>)}
          aria-label="Smoothing" />
        <b className="mono">{draft.toFixed(2)}</b>
      </label>
      {view.logy !== undefined && (
        <button className={view.logy ? "btn btn-sm on" : "btn btn-sm"} aria-pressed={view.logy}
          onClick={() => setView({ logy: !view.logy } as Partial<V>)} title="Logarithmic y axis">log y</button>
      )}
      {view.xr && (
        <button className="chip on zoom-chip" onClick={() => setView({ xr: null } as Partial<V>)} title="Zoom out (or double-click a chart)">
          <Icon name="zoomOut" size={13} />{fmtX(view.xr[0], view.x)} – {view.x === "ts" ? fmtX(view.xr[1], "ts") : fmtInt(view.xr[1])}
          <Icon name="x" size={12} />
        </button>
      )}
      <span className="toolbar-note muted small">
        {names ? `${names} metric${names === 1 ? "" : "s"}` : ""}
        {width && width > 1 ? ` · ${fmtInt(width)} ${view.x === "ts" ? "ms" : "steps"}/point` : width === 1 ? " · every point" : ""}
      </span>
      {extra}
    </div>
  );
}

export function MetricsGrid({ store, runs, view, setView, syncKey, loading, error, marks, emptyHint, panelExtra }: {
  store: SeriesStore; runs: PanelRun[]; view: GridView; setView: (p: Partial<GridView>) => void; syncKey: string;
  loading: boolean; error: ApiError | undefined; marks?: Mark[];
  emptyHint?: ReactNode; panelExtra?: (name: string) => ReactNode }) {
  const { theme } = useTheme();
  const names = useStoreNames(store);
  const match = useMemo(() => nameMatcher(view.m), [view.m]);
  const shown = useMemo(() => names.filter(match), [names, match]);
  const groups = useMemo(() => groupNames(shown), [shown]);
  const onZoom = (range: [number, number] | null) => setView({ xr: range });

  if (error && !names.length) return <ErrorBanner error={error} />;
  if (!names.length) return loading ? <div className="chart-grid">{[0, 1, 2, 3].map((i) => <div key={i} className="panel chart-skeleton" />)}</div>
    : <Empty title="No metrics yet" icon="runs">{emptyHint}</Empty>;
  return (
    <div className="metric-groups">
      <ErrorBanner error={error} />
      {!shown.length && <Empty compact title="No metric matches the filter" icon="search" />}
      {groups.map(([group, list]) => (
        <section key={group || "other"} className="metric-group">
          {groups.length > 1 && <h3 className="group-title">{group || "other"} <span className="muted">{list.length}</span></h3>}
          <div className="chart-grid">
            {list.map((name) => (
              <MetricPanel key={name} store={store} name={name} runs={runs} smoothing={view.smooth} xMode={view.x}
                zoom={view.xr} onZoom={onZoom} syncKey={syncKey} theme={theme} logY={view.logy} marks={marks}
                headExtra={panelExtra?.(name)} />
            ))}
          </div>
        </section>
      ))}
      {loading && <div className="loading-line" aria-hidden="true" />}
    </div>
  );
}

