// One metric's panel with the runs grouped: per group a band from min to max around the
// mean line, in the group's colour (bands.ts does the maths). Same behaviour as a
// MetricPanel: synced crosshair, drag to zoom, double-click to zoom out, event marks,
// redraw at most once a frame as the store changes.

import { useCallback, useEffect, useMemo, useRef } from "react";
import uPlot from "uplot";
import { autoSize } from "../../charts/axis";
import { withAlpha } from "../../charts/colors";
import { fmtX, xTicks, zoomAndMarkHooks, type Mark, type XMode } from "../../charts/MetricPanel";
import { nearestValue } from "../../charts/panelData";
import type { SeriesStore } from "../../charts/series";
import { chartTheme } from "../../charts/theme";
import { UPlotChart } from "../../charts/UPlotChart";
import { fmtTick, fmtValue } from "../../lib/format";
import { bandsData, type BandGroup } from "./bands";

export interface BandPanelProps {
  store: SeriesStore;
  name: string;
  groups: BandGroup[];
  smoothing: number;
  xMode: XMode;
  zoom: [number, number] | null;
  onZoom: (range: [number, number] | null) => void;
  syncKey: string;
  theme: string;
  marks?: Mark[];
  title?: React.ReactNode;
  /** Beside the title: a control for this metric. */
  headExtra?: React.ReactNode;
  height?: number;
}

/** uPlot series and bands for groups: per group, min and max (no line, the band between) and the mean. */
export function bandSeries(groups: readonly BandGroup[]): { series: uPlot.Series[]; bands: uPlot.Band[] } {
  const series: uPlot.Series[] = [{}];
  const bands: uPlot.Band[] = [];
  groups.forEach((g, i) => {
    const base = 1 + 3 * i;
    series.push(
      { label: `${g.label} min`, stroke: "transparent", points: { show: false }, spanGaps: true },
      { label: `${g.label} max`, stroke: "transparent", points: { show: false }, spanGaps: true },
      { label: g.label, stroke: g.color, width: 1.5, points: { show: false }, spanGaps: true },
    );
    bands.push({ series: [base + 1, base], fill: withAlpha(g.color, 0.16) });
  });
  return { series, bands };
}

export function BandPanel({ store, name, groups, smoothing, xMode, zoom, onZoom, syncKey, theme, marks, title, headExtra, height = 190 }: BandPanelProps) {
  const chart = useRef<uPlot | null>(null);
  const readout = useRef<HTMLDivElement>(null);
  const panel = useRef<HTMLDivElement>(null);
  const drawn = useRef(false);
  const state = useRef({ groups, smoothing, zoom, onZoom, marks, xMode });
  state.current = { groups, smoothing, zoom, onZoom, marks, xMode };
  const groupKey = groups.map((g) => `${g.key}:${g.color}:${g.runs.join(",")}`).join("|");

  const writeReadout = useCallback((u: uPlot) => {
    const el = readout.current;
    if (!el) return;
    const xs = u.data[0];
    const idx = u.cursor.idx;
    if (!xs?.length || idx === null || idx === undefined) {
      el.textContent = "";
      return;
    }
    const nodes: Node[] = [];
    const label = document.createElement("span");
    label.className = "readout-x";
    label.textContent = fmtX(xs[idx] as number, state.current.xMode);
    nodes.push(label);
    state.current.groups.forEach((g, i) => {
      const mean = u.data[3 + 3 * i] as (number | null)[];
      const j = nearestValue(mean, idx);
      const item = document.createElement("span");
      item.className = "readout-item";
      const swatch = document.createElement("i");
      swatch.style.background = g.color;
      const text = document.createElement("span");
      text.className = "readout-run";
      text.textContent = g.label;
      const v = document.createElement("b");
      v.textContent = j >= 0 ? `${fmtValue(mean[j])} (${fmtValue((u.data[1 + 3 * i] as (number | null)[])[j])}–${
        fmtValue((u.data[2 + 3 * i] as (number | null)[])[j])})` : "—";
      item.append(swatch, text, v);
      nodes.push(item);
    });
    el.replaceChildren(...nodes);
  }, []);

  const options = useMemo<Omit<uPlot.Options, "width" | "height">>(() => {
    const t = chartTheme();
    const { series, bands } = bandSeries(state.current.groups);
    const axis = { stroke: t.axis, font: t.font, labelFont: t.font, grid: { stroke: t.grid, width: 1 },
      ticks: { stroke: t.grid, width: 1, size: 4 } };
    return {
      ms: 1,
      series,
      bands,
      legend: { show: false },
      padding: [8, 16, 0, 0],
      cursor: { sync: { key: syncKey, setSeries: false }, drag: { x: true, y: false, setScale: false },
        points: { show: false } },
      scales: { x: { time: xMode === "ts" } },
      axes: [
        { ...axis, size: 30, values: xTicks(xMode) },
        { ...axis, size: autoSize, values: (_u: uPlot, splits: number[]) => splits.map(fmtTick) },
      ],
      hooks: { setCursor: [(u) => writeReadout(u)], ...zoomAndMarkHooks(state, t.font) },
    };
  }, [groupKey, xMode, syncKey, theme, writeReadout]); // eslint-disable-line react-hooks/exhaustive-deps

  const apply = useCallback(() => {
    const u = chart.current;
    if (!u) return;
    const s = state.current;
    const data = bandsData(store, name, s.groups, s.smoothing);
    if (!drawn.current && data[0].length) {
      drawn.current = true;
      // As MetricPanel: when this panel first had points to draw (bench/ui_bench.py reads it).
      performance.mark(`gpuplane:chart-drawn:${name}`);
    }
    if (panel.current) {  // as MetricPanel: for the browser tests and benches
      panel.current.dataset.points = String(data[0].length);
      panel.current.dataset.lastX = String(data[0].length ? data[0][data[0].length - 1] : "");
    }
    if (s.zoom) {
      u.setData(data, false);
      u.setScale("x", { min: s.zoom[0], max: s.zoom[1] });
    } else u.setData(data, true);
  }, [store, name]);

  const onChart = useCallback((u: uPlot | null) => {
    chart.current = u;
    if (u) apply();
  }, [apply]);
  useEffect(() => store.subscribe(name, apply), [store, name, apply]);
  useEffect(() => apply(), [smoothing, zoom?.[0], zoom?.[1], marks, groupKey, apply]); // eslint-disable-line react-hooks/exhaustive-deps

  return (
    <div ref={panel} className="panel chart-panel multi viz-band-panel" data-metric={name} data-groups={groups.length}>
      <div className="chart-head">
        <span className="chart-title" title={name}>{title ?? name}</span>
        {headExtra}
        <div className="readout" ref={readout} />
      </div>
      <UPlotChart options={options} height={height} onChart={onChart} />
    </div>
  );
}
