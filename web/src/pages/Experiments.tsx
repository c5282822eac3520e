// Experiments: the workspace for a study. Pick projects and experiments (or a sweep); see
// every run in a virtualised table (config keys typed, a summary chooser per metric, filter,
// sort, group, diff-only, a baseline), the metric panels with the ★ primary metric first and,
// for a sweep, parallel coordinates, a scatter and parameter importance. Brushing an axis
// filters the table and the charts. The URL holds the whole view (experiments/viewState.ts).

import { memo, useEffect, useMemo, useState } from "react";
import { useResource } from "../api/hooks";
import { colorsFor } from "../charts/colors";
import { RunHighlight } from "../charts/highlight";
import { GridToolbar, nameMatcher } from "../charts/MetricsGrid";
import { Empty, ErrorBanner, Loading, PageHeader } from "../components/ui";
import { Icon } from "../components/Icon";
import { fmtInt } from "../lib/format";
import type { PrimaryScope } from "../lib/primary";
import { useUrlState } from "../router/router";
import { workspaceApi } from "../experiments/api";
import { RUN_COLUMNS, metricId, valueKey, type Column } from "../experiments/columns";
import { FilterBar } from "../experiments/FilterBar";
import { useLiveRefresh } from "../experiments/liveRefresh";
import { MetricStar, workspaceScope } from "../experiments/primaryStar";
import { RunsTable } from "../experiments/RunsTable";
import { Selection } from "../experiments/Selection";
import { SavedViews, ShareButton } from "../experiments/ShareViews";
import { TableToolbar } from "../experiments/TableToolbar";
import { applyFilters, buildRows, configColumns, differingColumns, groupRows, metricColumns, sortRows } from "../experiments/table";
import { currentView, hasSelection, viewSchema, type ExperimentsView } from "../experiments/viewState";
import { axisOf, sweepAxes, toVizRows } from "../experiments/vizData";
import { ExperimentPanels, ImportanceTable, ParallelCoords, Scatter, importance, passesBrushes } from "../experiments/viz";

const LIMIT = 1000;
/** The panels overlay at most this many runs (the table's first, in its order). */
const PANEL_RUNS = 50;

export function Experiments() {
  const [view, setView] = useUrlState(viewSchema);
  const [hover, setHover] = useState<string | null>(null);
  // The hovered run, for the line charts to stress without re-rendering (the panels are memoised).
  const highlight = useMemo(() => new RunHighlight(), []);
  useEffect(() => highlight.set(hover), [highlight, hover]);
  const selKey = `${view.p.join(",")}|${view.e.join(",")}|${view.sweep}`;
  const data = useResource(hasSelection(view)
    ? (s) => workspaceApi.runs({ projects: view.p, experiments: view.e, sweep: view.sweep || null, limit: LIMIT }, s)
    : null, [selKey]);
  const reply = data.data;
  const runIds = useMemo(() => new Set((reply?.runs ?? []).map((r) => r.id)), [reply]);
  const refreshTable = useLiveRefresh(runIds, !!reply?.runs.some((r) => r.status === "RUNNING"), data.reload);
  const metrics = useMemo(() => reply?.metrics ?? [], [reply]);
  const metricNames = useMemo(() => metrics.map((m) => m.name), [metrics]);
  const rows = useMemo(() => buildRows(reply?.runs ?? [], metrics, view.s), [reply, metrics, view.s]);
  const configCols = useMemo(() => configColumns(reply?.config_keys.map((k) => k.key) ?? [], rows), [reply, rows]);
  const metricCols = useMemo(() => metricColumns(metrics), [metrics]);
  const allColumns = useMemo(() => [...RUN_COLUMNS, ...configCols, ...metricCols], [configCols, metricCols]);
  const colors = useMemo(() => colorsFor((reply?.runs ?? []).map((r) => r.id)), [reply]);
  const labels = useMemo(() => new Map((reply?.runs ?? []).map((r) => [r.id, r.name ?? r.id])), [reply]);
  const experimentNames = useMemo(() => new Map((reply?.runs ?? []).filter((r) => r.experiment_id)
    .map((r) => [r.experiment_id!, `${r.project ?? "?"} / ${r.experiment ?? r.experiment_id}`])), [reply]);

  const primary = metrics.find((m) => m.primary) ?? null;
  const scope = useMemo(() => workspaceScope(view, reply?.runs ?? []), [view.p, view.e, view.sweep, reply]); // eslint-disable-line react-hooks/exhaustive-deps
  const primaryCol = primary ? metricCols.find((c) => c.id === metricId(primary.name)) ?? null : null;
  const vizKeys = useMemo(() => [...configCols.map((c) => c.id), ...metricCols.map((c) => c.id)], [configCols, metricCols]);
  const filtered = useMemo(() => applyFilters(rows, view.f), [rows, view.f]);
  const vizRows = useMemo(() => toVizRows(filtered, vizKeys), [filtered, vizKeys]);
  // Brushes on the sweep's axes filter the table and the panels as the table's filters do.
  const brushed = useMemo(() => {
    if (!Object.keys(view.b).length) return filtered;
    const pass = new Set(vizRows.filter((r) => passesBrushes(r, view.b)).map((r) => r.id));
    return filtered.filter((r) => pass.has(r.run.id));
  }, [filtered, vizRows, view.b]);
  const sorted = useMemo(() => sortRows(brushed, view.sort), [brushed, view.sort]);
  const groupCol = allColumns.find((c) => c.id === view.g) ?? null;
  const groups = useMemo(() => (groupCol ? groupRows(sorted, groupCol.id, metricCols.map((c) => c.id)) : null),
    [sorted, groupCol, metricCols]);
  const varying = useMemo(() => new Set(differingColumns(sorted, configCols.map((c) => c.id))), [sorted, configCols]);
  // The sweep's axes come from the runs before brushing: a brush must not remove the axis it is on.
  const sweepKeys = useMemo(() => new Set(differingColumns(filtered, configCols.map((c) => c.id))), [filtered, configCols]);
  const hidden = useMemo(() => new Set(view.hide), [view.hide]);
  // Memoised, as every prop of the table: a row hover re-renders the page, and must not re-render every row.
  const shownColumns = useMemo(() => allColumns.filter((c) => c.id === "name" || (!hidden.has(c.id) && (!view.diff ||
    c.group !== "config" || varying.has(c.id)))), [allColumns, hidden, view.diff, varying]);
  const baseline = view.base ? rows.find((r) => r.run.id === view.base) : undefined;

  const setFilter = (col: string, f: ExperimentsView["f"][string] | null) => {
    const next = { ...currentView().f };
    if (f) next[col] = f;
    else delete next[col];
    setView({ f: next });
  };

  return (
    <div className="page exp-page">
      <PageHeader title="Experiments" sub={reply ? `${fmtInt(reply.runs.length)} runs${reply.truncated ? ` (the first ${fmtInt(LIMIT)})` : ""} · ${fmtInt(sorted.length)} shown` : undefined}>
        {hasSelection(view) && (
          <button type="button" className="btn btn-sm" onClick={data.reload} disabled={data.loading} title="Load the runs again">
            <Icon name="refresh" size={13} />Refresh
          </button>
        )}
        <ShareButton />
        <SavedViews />
      </PageHeader>
      <Selection value={view} experimentNames={experimentNames}
        onChange={(sel) => setView({ ...sel, f: {}, b: {}, base: "", g: "", sort: "" }, { push: true })} />
      <ErrorBanner error={data.error} onRetry={data.reload} />
      {!hasSelection(view) ? (
        <Empty title="Pick what to study" icon="experiments">
          Add one or more projects or experiments above, or choose a sweep.
        </Empty>
      ) : !reply ? (
        data.error ? null : <Loading rows={6} />
      ) : !reply.runs.length ? (
        <Empty title="No runs here yet" icon="runs">The selected projects, experiments or sweep have no runs.</Empty>
      ) : (
        <>
          {view.sweep && (
            <SweepAnalysis view={view} setView={setView} configCols={configCols} varying={sweepKeys} metric={primaryCol}
              metricCols={metricCols} direction={primary?.direction ?? null} rows={vizRows} colors={colors} labels={labels}
              hover={hover} onHover={setHover} />
          )}
          <section className="exp-section" aria-label="Runs">
            <div className="toolbar exp-toolbar">
              <FilterBar columns={allColumns} rows={rows} filters={view.f} onChange={setFilter} />
              <TableToolbar columns={allColumns} hidden={view.hide} onHidden={(hide) => setView({ hide })} group={view.g}
                onGroup={(g) => setView({ g })} diff={view.diff} onDiff={(diff) => setView({ diff })}
                baselineName={baseline ? baseline.run.name ?? baseline.run.id : null} onClearBaseline={() => setView({ base: "" })} />
              {Object.keys(view.b).length > 0 && (
                <button type="button" className="chip on" onClick={() => setView({ b: {} })} title="Clear the brushes">
                  brushed: {fmtInt(brushed.length)} of {fmtInt(filtered.length)} <Icon name="x" size={11} />
                </button>
              )}
            </div>
            {sorted.length ? (
              <RunsTable rows={sorted} groups={groups} groupLabel={groupCol?.label} columns={shownColumns} metrics={metrics}
                choices={view.s} onChoice={(name, choice) => setView({ s: { ...currentView().s, [name]: choice } })}
                sort={view.sort} onSort={(sort) => setView({ sort })} baseline={view.base} onBaseline={(base) => setView({ base })}
                colors={colors} highlight={hover} onHover={view.sweep ? setHover : undefined} />
            ) : (
              <Empty title="No run passes the filters" compact>Remove a filter or a brush to see runs again.</Empty>
            )}
          </section>
          <Panels view={view} setView={setView} rows={sorted} metrics={metricNames} colors={colors} labels={labels}
            groupCol={groupCol} primary={primary?.name ?? null} scope={scope} onPrimaryChanged={data.reload}
            onPoints={refreshTable} highlight={highlight} />
        </>
      )}
    </div>
  );
}

// Memoised: hovering a row re-renders the page, never the charts.
const Panels = memo(function Panels({ view, setView, rows, metrics, colors, labels, groupCol, primary, scope, onPrimaryChanged,
  onPoints, highlight }: {
  view: ExperimentsView; setView: (p: Partial<ExperimentsView>) => void; rows: ReturnType<typeof sortRows>; metrics: string[];
  colors: Map<string, string>; labels: Map<string, string>; groupCol: Column | null; primary: string | null;
  scope: PrimaryScope | null; onPrimaryChanged: () => void; onPoints: () => void; highlight: RunHighlight }) {
  const runs = useMemo(() => rows.slice(0, PANEL_RUNS).map((r) => ({ id: r.run.id, label: labels.get(r.run.id) ?? r.run.id,
    color: colors.get(r.run.id)!, group: groupCol ? valueKey(r.values[groupCol.id]) : undefined })), [rows, labels, colors, groupCol]);
  const shown = useMemo(() => metrics.filter(nameMatcher(view.m)), [metrics, view.m]); // the reply's order: the primary first
  const live = useMemo(() => rows.slice(0, PANEL_RUNS).filter((r) => r.run.status === "RUNNING").map((r) => r.run.id), [rows]);
  return (
    <section className="exp-section" aria-label="Metric panels">
      <GridToolbar view={view} setView={setView} names={0} width={null}
        extra={rows.length > PANEL_RUNS && <span className="toolbar-note muted small">the first {PANEL_RUNS} of {fmtInt(rows.length)} runs</span>} />
      {shown.length ? (
        <ExperimentPanels runs={runs} metrics={shown} x={view.x} smooth={view.smooth} zoom={view.xr}
          onZoom={(xr) => setView({ xr })} live={live} onPoints={onPoints} highlight={highlight} groups={!!groupCol} primary={scope ? null : primary /* the ★ button shows it */}
          headExtra={scope ? (name) => <MetricStar name={name} primary={primary} scope={scope} onChanged={onPrimaryChanged} /> : undefined} />
      ) : (
        <Empty title={metrics.length ? "No metric matches the filter" : "These runs have logged no metrics"} compact />
      )}
    </section>
  );
});

function SweepAnalysis({ view, setView, configCols, varying, metric, metricCols, direction, rows, colors, labels, hover, onHover }: {
  view: ExperimentsView; setView: (p: Partial<ExperimentsView>) => void; configCols: Column[]; varying: Set<string>;
  metric: Column | null; metricCols: Column[]; direction: "min" | "max" | null; rows: ReturnType<typeof toVizRows>;
  colors: Map<string, string>; labels: Map<string, string>; hover: string | null; onHover: (id: string | null) => void }) {
  const axes = useMemo(() => sweepAxes(configCols, varying, metric, rows), [configCols, varying, metric, rows]);
  const choices = useMemo(() => [...configCols, ...metricCols], [configCols, metricCols]);
  const axisFor = (id: string, fallback: Column | null | undefined) => {
    const col = choices.find((c) => c.id === id) ?? fallback;
    return col ? axisOf(col.id, col.label, rows) : null;
  };
  const x = axisFor(view.sx, configCols.find((c) => varying.has(c.id)) ?? configCols[0]);
  const y = axisFor(view.sy, metric ?? metricCols[0]);
  const keyLabels = useMemo(() => new Map(choices.map((c) => [c.id, c.label])), [choices]);
  const scores = useMemo(() => (metric ? importance(rows, configCols.filter((c) => varying.has(c.id)).map((c) => c.id), metric.id,
    direction) : []), [rows, configCols, varying, metric, direction]);
  const onBrush = (key: string, brush: ExperimentsView["b"][string] | null) => {
    const next = { ...currentView().b };
    if (brush) next[key] = brush;
    else delete next[key];
    setView({ b: next });
  };
  return (
    <section className="exp-section exp-sweep" aria-label="Sweep analysis">
      <h2 className="section-title">Parallel coordinates</h2>
      {axes.length >= 2 ? (
        <ParallelCoords axes={axes} rows={rows} colors={colors} brushes={view.b} onBrush={onBrush} highlight={hover} onHover={onHover} />
      ) : <Empty title="No config key varies across these runs" compact />}
      <div className="exp-sweep-grid">
        <div className="exp-scatter">
          <div className="toolbar">
            <h2 className="section-title">Scatter</h2>
            <AxisSelect label="x" value={x?.key ?? ""} options={choices} onChange={(sx) => setView({ sx })} />
            <AxisSelect label="y" value={y?.key ?? ""} options={choices} onChange={(sy) => setView({ sy })} />
          </div>
          {x && y ? <Scatter rows={rows} x={x} y={y} colors={colors} brushes={view.b} onHover={onHover} highlight={hover} labels={labels} />
            : <Empty title="Nothing to plot" compact />}
        </div>
        <div className="exp-importance">
          <h2 className="section-title">Parameter importance</h2>
          {metric ? <ImportanceTable rows={scores} target={metric.label} labels={keyLabels} />
            : <Empty title="No metric to score the keys against" compact />}
        </div>
      </div>
    </section>
  );
}

function AxisSelect({ label, value, options, onChange }: { label: string; value: string; options: Column[]; onChange: (v: string) => void }) {
  return (
    <label className="exp-inline">
      <span>{label}</span>
      <select value={value} onChange={(e) => onChange(e.target.value)} aria-label={`Scatter ${label} axis`}>
        {options.map((c) => <option key={c.id} value={c.id}>{c.group === "metric" ? `${c.label} (metric)` : c.label}</option>)}
      </select>
    </label>
  );
}
