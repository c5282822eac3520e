// ChartPanel: one metric, one or more runs. EMA smoothing, a crosshair readout written
// straight to the DOM (no React render per mouse move), drag to zoom (the page fetches
// finer points for the new range), double-click to zoom out, x by step or by time.

import { type ReactNode, useCallback, useEffect, useMemo, useRef } from "react";
import uPlot from "uplot";
import { fmtDateTime, fmtInt, fmtTick, fmtTimeTicks, fmtValue } from "../lib/format";
import { autoSize } from "./axis";
import { withAlpha } from "./colors";
import { lastValue, nearestValue, panelData, type PanelRun } from "./panelData";
import type { SeriesStore } from "./series";
import type { RunHighlight } from "./highlight";
import { chartTheme } from "./theme";
import { UPlotChart } from "./UPlotChart";

export type XMode = "step" | "ts";

/** An event on the x axis (a step or a time). */
export interface Mark {
  x: number;
  color: string;
  label: string;
  critical?: boolean;
}

export interface MetricPanelProps {
  store: SeriesStore;
  name: string;
  runs: readonly PanelRun[];
  smoothing: number;
  xMode: XMode;
  zoom: [number, number] | null;
  onZoom: (range: [number, number] | null) => void;
  syncKey: string;
  theme: string;
  logY?: boolean;
  height?: number;
  /** Marks on the x axis (events at a step or time). */
  marks?: Mark[];
  /** Beside the title: a control for this metric (the run page's primary-metric star). */
  headExtra?: ReactNode;
  /** The run the page points at, stressed over the others (several runs only). */
  highlight?: RunHighlight;
}

/** The others' opacity while a run is stressed (pointed at elsewhere on the page, or hovered here). */
export const DIMMED_ALPHA = 0.3;

export function fmtX(x: number, mode: XMode): string {
  return mode === "ts" ? fmtDateTime(x) : `step ${fmtInt(x)}`;
}

export function MetricPanel(props: MetricPanelProps) {
  const { store, name, runs, smoothing, xMode, zoom, onZoom, syncKey, theme, logY = false, height = 190, marks, highlight } = props;
  const chart = useRef<uPlot | null>(null);
  const readout = useRef<HTMLDivElement>(null);
  const panel = useRef<HTMLDivElement>(null);
  const drawn = useRef(false);
  const state = useRef({ zoom, onZoom, smoothing, runs, xMode, logY, marks });
  state.current = { zoom, onZoom, smoothing, runs, xMode, logY, marks };
  const single = runs.length === 1;
  const runKey = runs.map((r) => `${r.id}:${r.color}:${r.label}`).join("|");
  const smoothed = smoothing > 0;

  const writeReadout = useCallback((u: uPlot) => {
    const el = readout.current;
    if (!el) return;
    const { runs: rs, xMode: mode, smoothing: sm } = state.current;
    const xs = u.data[0];
    if (!xs || !xs.length) {
      el.textContent = "";
      return;
    }
    const hover = u.cursor.idx;
    const hovering = hover !== null && hover !== undefined;
    const idx = hovering ? hover : xs.length - 1;
    const label = document.createElement("span");
    label.className = "readout-x";
    // Not hovering, several runs: each run's latest value (runs end at different steps).
    label.textContent = hovering || single ? fmtX(xs[idx] as number, mode) : "latest";
    const nodes: Node[] = [label];
    rs.forEach((run, i) => {
      const col = single ? u.data[sm > 0 ? 4 : 3] : u.data[1 + 2 * i + (sm > 0 ? 1 : 0)];
      const j = !col ? -1 : hovering || single ? nearestValue(col as (number | null)[], idx) : lastValue(col as (number | null)[]);
      const value = j >= 0 ? (col[j] as number) : null;
      const item = document.createElement("span");
      item.className = "readout-item";
      if (!hovering && !single && j >= 0) item.title = fmtX(xs[j] as number, mode);
      const swatch = document.createElement("i");
      swatch.style.background = run.color;
      item.appendChild(swatch);
      if (!single) {
        const name = document.createElement("span");
        name.className = "readout-run";
        name.textContent = run.label;
        item.appendChild(name);
      }
      const v = document.createElement("b");
      v.textContent = fmtValue(value);
      item.appendChild(v);
      if (single && sm > 0) {
        const rawCol = u.data[3] as (number | null)[];
        const k = nearestValue(rawCol, idx);
        const raw = document.createElement("span");
        raw.className = "readout-raw";
        raw.textContent = `raw ${fmtValue(k >= 0 ? rawCol[k] : null)}`;
        item.appendChild(raw);
      }
      nodes.push(item);
    });
    el.replaceChildren(...nodes);
  }, [single]);

  const options = useMemo<Omit<uPlot.Options, "width" | "height">>(() => {
    const t = chartTheme();
    const series: uPlot.Series[] = [{}];
    const bands: uPlot.Band[] = [];
    if (single) {
      const color = runs[0].color;
      series.push(
        { label: "min", stroke: "transparent", points: { show: false } },
        { label: "max", stroke: "transparent", points: { show: false } },
        { label: "value", stroke: smoothed ? withAlpha(color, 0.3) : color, width: 1.25, spanGaps: true,
          points: { show: false } },
        { label: "smoothed", stroke: color, width: 1.5, spanGaps: true, show: smoothed, points: { show: false } },
      );
      bands.push({ series: [2, 1], fill: withAlpha(color, 0.12) });
    } else {
      // Overlaid runs' lines 1 px wide: Skia draws a stroke no wider than a device pixel as a
      // hairline, and strokes a wider one as a filled polygon, which dominated redraws of panels
      // overlaying many runs (the Experiments workspace following live runs).
      for (const run of runs) {
        series.push(
          { label: run.label, stroke: smoothed ? withAlpha(run.color, 0.22) : run.color, width: 1, spanGaps: true,
            points: { show: false } },
          { label: `${run.label} (smoothed)`, stroke: run.color, width: 1, spanGaps: true, show: smoothed,
            points: { show: false } },
        );
      }
    }
    const axis = {
      stroke: t.axis, font: t.font, labelFont: t.font, size: 44,
      grid: { stroke: t.grid, width: 1 }, ticks: { stroke: t.grid, width: 1, size: 4 },
    };
    const opts: Omit<uPlot.Options, "width" | "height"> = {
      ms: 1,
      series,
      bands,
      legend: { show: false },
      padding: [8, 16, 0, 0], // room for the last x tick's label, centred on the right edge
      cursor: {
        sync: { key: syncKey, setSeries: false },
        drag: { x: true, y: false, setScale: false },
        points: { size: 5, fill: t.bg, width: 1.5 },
        focus: { prox: 16 },
      },
      focus: { alpha: highlight && !single ? DIMMED_ALPHA : 1 },
      scales: {
        x: { time: xMode === "ts" },
        y: { distr: logY ? 3 : 1 },
      },
      axes: [
        { ...axis, size: 30, values: xTicks(xMode) },
        { ...axis, size: autoSize, values: (_u: uPlot, splits: number[]) => splits.map(fmtTick) },
      ],
      hooks: { setCursor: [(u) => writeReadout(u)], ...zoomAndMarkHooks(state, t.font) },
    };
    return opts;
    // theme: rebuild with the new CSS colors; runKey: the series list changed.
  }, [runKey, single, smoothed, xMode, syncKey, theme, logY, writeReadout, !!highlight]); // eslint-disable-line react-hooks/exhaustive-deps

  const apply = useCallback(() => {
    const u = chart.current;
    if (!u) return;
    const s = state.current;
    const data = panelData(store, name, s.runs, s.smoothing, s.logY);
    if (!drawn.current && data[0].length) {
      drawn.current = true;
      // For load-time checks (scripts/measure-open.mjs): when this panel first had points to draw.
      performance.mark(`gpuplane:chart-drawn:${name}`);
    }
    // How many x values the chart holds, and its last, for the browser tests and benches (web/e2e):
    // a live run's last x moves on (the count may drop when an overview is read again).
    if (panel.current) {
      panel.current.dataset.points = String(data[0].length);
      panel.current.dataset.lastX = String(data[0].length ? data[0][data[0].length - 1] : "");
    }
    if (s.zoom) {
      u.setData(data, false);
      u.setScale("x", { min: s.zoom[0], max: s.zoom[1] });
    } else {
      u.setData(data, true);
    }
    writeReadout(u);
  }, [store, name, writeReadout]);

  // The stressed run's shown line (smoothed or raw) in focus, the others dimmed; none: all as drawn.
  const stress = useCallback((u: uPlot, run: string | null) => {
    const { runs: rs, smoothing: sm } = state.current;
    const i = run === null || rs.length < 2 ? -1 : rs.findIndex((r) => r.id === run);
    u.setSeries(i < 0 ? null : 1 + 2 * i + (sm > 0 ? 1 : 0), { focus: true });
  }, []);

  const onChart = useCallback((u: uPlot | null) => {
    chart.current = u;
    if (!u) return;
    apply();
    if (highlight?.current) stress(u, highlight.current);
  }, [apply, highlight, stress]);

  useEffect(() => highlight?.subscribe((run) => {
    if (chart.current) stress(chart.current, run);
  }), [highlight, stress]);

  // New points arrive through the store, at most once per animation frame.
  useEffect(() => store.subscribe(name, apply), [store, name, apply]);
  // Smoothing, zoom or marks changed: recompute from the columns we hold.
  useEffect(() => apply(), [smoothing, zoom?.[0], zoom?.[1], marks, apply]); // eslint-disable-line react-hooks/exhaustive-deps

  return (
    <div ref={panel} className={single ? "panel chart-panel" : "panel chart-panel multi"} data-metric={name}>
      <div className="chart-head">
        <span className="chart-title" title={name}>{name}</span>
        {props.headExtra}
        <div className="readout" ref={readout} />
      </div>
      <UPlotChart options={options} height={height} onChart={onChart} />
    </div>
  );
}

/** The x axis' tick labels: times, or steps with k and M past 10,000 and 1,000,000. */
export function xTicks(xMode: XMode): (u: uPlot, splits: number[]) => string[] {
  if (xMode === "ts") return (u, splits) => fmtTimeTicks(splits, (u.scales.x.max ?? 0) - (u.scales.x.min ?? 0));
  return (_u, splits) => splits.map((v) =>
    Math.abs(v) >= 1e6 ? `${fmtTick(v / 1e6)}M` : Math.abs(v) >= 10_000 ? `${fmtTick(v / 1000)}k` : fmtTick(v));
}

/** A panel's hooks for zooming (drag to zoom in, double-click to zoom out, through the panel's
 * current ``onZoom``) and for drawing its marks. */
export function zoomAndMarkHooks(state: { current: { onZoom: (r: [number, number] | null) => void; marks: MetricPanelProps["marks"] } },
  font: string): uPlot.Hooks.Arrays {
  return {
    setSelect: [(u) => {
      if (u.select.width < 4) return;
      const lo = u.posToVal(u.select.left, "x");
      const hi = u.posToVal(u.select.left + u.select.width, "x");
      u.setSelect({ left: 0, top: 0, width: 0, height: 0 }, false);
      if (hi > lo) state.current.onZoom([Math.floor(lo), Math.ceil(hi)]);
    }],
    draw: [(u) => drawMarks(u, state.current.marks, font)],
    ready: [(u) => u.over.addEventListener("dblclick", () => state.current.onZoom(null))],
  };
}

export function drawMarks(u: uPlot, marks: MetricPanelProps["marks"], _font: string): void {
  if (!marks?.length) return;
  const { ctx } = u;
  const { top, height } = u.bbox;
  const [lo, hi] = [u.scales.x.min ?? -Infinity, u.scales.x.max ?? Infinity];
  const dpr = window.devicePixelRatio || 1;
  const tick = 7 * dpr;
  ctx.save();
  ctx.lineWidth = dpr;
  for (const mark of marks) {
    if (mark.x < lo || mark.x > hi) continue;
    const x = Math.round(u.valToPos(mark.x, "x", true)) + 0.5;
    ctx.strokeStyle = mark.color;
    ctx.beginPath();
    if (mark.critical) {
      // A critical event (NaN loss, GPU lost) gets a full-height line; the rest a tick on the x axis.
      ctx.globalAlpha = 0.7;
      ctx.setLineDash([4 * dpr, 3 * dpr]);
      ctx.moveTo(x, top);
    } else {
      ctx.globalAlpha = 0.8;
      ctx.setLineDash([]);
      ctx.moveTo(x, top + height - tick);
    }
    ctx.lineTo(x, top + height);
    ctx.stroke();
  }
  ctx.restore();
}
