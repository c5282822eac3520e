// Parallel coordinates on a canvas: one polyline per run in its colour over the config
// axes and the metric summary. Drag along an axis to brush it (a range, or the categories
// the drag covers); drag again to replace, click the axis to clear. Several brushed axes
// are an AND; runs outside them are drawn faint. Hover highlights the nearest run.
//
// Built for 200 runs at 60 fps while brushing: the pixel of every run on every axis is
// precomputed (projection.ts) when the rows, axes or width change; a mouse move only
// updates refs and asks for a frame; the frame redraws. The page hears of the brush when the
// pointer rests for a moment and when it is let go (it re-filters its table and panels then).
// No React render happens per mouse move. Below the chart, a form sets the same brushes
// by keyboard.

import { useEffect, useMemo, useRef, useState, type FormEvent } from "react";
import { chartTheme } from "../../charts/theme";
import { fmtTick } from "../../lib/format";
import { useTheme } from "../../lib/theme";
import { categoryLabel, passesBrushes, rangeBrush } from "./brush";
import { brushDrag } from "./brushDrag";
import { fit, localPoint, prepare, useFrame, useWidth } from "./canvas";
import { axisAt, nearestRow, project, type Layout, type Projection } from "./projection";
import { brushFromDrag, brushSpans, categoriesOf, type Scale } from "./scale";
import type { Axis, Brush, Brushes, VizRow } from "./types";

export interface ParallelCoordsProps {
  axes: Axis[];
  rows: VizRow[];
  colors: Map<string, string>;
  brushes: Brushes;
  onBrush: (key: string, brush: Brush | null) => void;
  highlight?: string | null;
  onHover?: (id: string | null) => void;
  height?: number;
}

const MARGIN = { top: 36, bottom: 14, left: 44, right: 44 };
/** A drag's brush is told to the page when the pointer rests this long, and when it is let go. */
export const BRUSH_PAUSE_MS = 120;
const FALLBACK_COLOR = "#888888";

interface Drag {
  /** The axis by key: the page may change the axes (and their order) while a drag is on. */
  key: string;
  from: number;
  to: number;
  moved: boolean;
}

export function pcLayout(width: number, height: number): Layout {
  return { width, height, ...MARGIN };
}

export function ParallelCoords(props: ParallelCoordsProps) {
  const { axes, rows, colors, brushes, onBrush, highlight = null, onHover, height = 300 } = props;
  const [host, width] = useWidth<HTMLDivElement>();
  const canvas = useRef<HTMLCanvasElement>(null);
  const axesCanvas = useRef<HTMLCanvasElement>(null);
  const faintCanvas = useRef<HTMLCanvasElement>(null);
  const { theme } = useTheme();
  const projection = useMemo(() => (width > 0 ? project(axes, rows, pcLayout(width, height)) : null),
    [axes, rows, width, height]);
  const colours = useMemo(() => chartTheme(), [theme]); // eslint-disable-line react-hooks/exhaustive-deps

  // What the frame reads; refreshed each render, changed by pointer handlers without rendering.
  const live = useRef({ projection, brushes, colors, highlight, colours, drag: null as Drag | null, hover: -1,
    reported: "", pauseDue: false, pauseTimer: 0 as ReturnType<typeof setTimeout> | 0,
    axesFor: { projection: null as Projection | null, colours: null as ReturnType<typeof chartTheme> | null } });
  Object.assign(live.current, { projection, brushes, colors, highlight, colours });
  const callbacks = useRef({ onBrush, onHover });
  callbacks.current = { onBrush, onHover };

  const frame = useFrame(() => {
    const s = live.current;
    const el = canvas.current;
    if (!el || !s.projection) return;
    const drag = s.drag;
    const effective = dragBrushes(s.projection, s.brushes, drag);
    // The brush being dragged, told to the page when the pointer pauses (once per frame at most, and
    // only when it changed). Telling it on every frame of a drag re-filtered the whole page each
    // frame (table, scatter, panels): 40 ms a frame for 200 trials; the chart itself follows the pointer.
    if (drag?.moved && s.pauseDue && scaleOf(s.projection, drag)) {
      s.pauseDue = false;
      const key = drag.key;
      const brush = effective[key] ?? null;
      const said = JSON.stringify(brush);
      if (said !== s.reported) {
        s.reported = said;
        callbacks.current.onBrush(key, brush);
      }
    }
    const ctx = prepare(el, width, height);
    if (ctx) draw(ctx, s.projection, effective, s.colors, highlightIndex(s.projection, s.hover, s.highlight), s.colours);
    // The axes above and every run faint below: only when what they show changed, not on every
    // frame of a drag (a frame then strokes only the runs inside the brushes).
    if (s.axesFor.projection !== s.projection || s.axesFor.colours !== s.colours) {
      s.axesFor = { projection: s.projection, colours: s.colours };
      const top = axesCanvas.current && prepare(axesCanvas.current, width, height);
      if (top) drawAxes(top, s.projection, s.colours, width, height);
      const under = faintCanvas.current && prepare(faintCanvas.current, width, height);
      if (under) drawFaint(under, s.projection, s.colours);
    }
  });

  useEffect(() => frame(), [frame, projection, brushes, colors, highlight, colours]);
  useEffect(() => () => {
    if (live.current.pauseTimer) clearTimeout(live.current.pauseTimer);
    if (live.current.drag) brushDrag.end(); // unmounted mid-drag
  }, []);

  const onPointerDown = (e: React.PointerEvent<HTMLCanvasElement>) => {
    const p = live.current.projection;
    if (!p || e.button !== 0) return;
    const [x, y] = localPoint(e, e.currentTarget);
    const axis = axisAt(p.xs, x);
    if (axis < 0 || y < MARGIN.top - 12 || y > height - MARGIN.bottom + 8) return;
    e.currentTarget.setPointerCapture?.(e.pointerId);
    const at = clampY(y, height);
    if (!live.current.drag) brushDrag.start();
    live.current.drag = { key: p.scales[axis].axis.key, from: at, to: at, moved: false };
    live.current.reported = JSON.stringify(live.current.brushes[p.scales[axis].axis.key] ?? null);
    e.preventDefault();
  };

  const onPointerMove = (e: React.PointerEvent<HTMLCanvasElement>) => {
    const s = live.current;
    const p = s.projection;
    if (!p) return;
    const [x, y] = localPoint(e, e.currentTarget);
    if (s.drag) {
      s.drag.to = clampY(y, height);
      if (Math.abs(s.drag.to - s.drag.from) >= 3) s.drag.moved = true;
      if (s.pauseTimer) clearTimeout(s.pauseTimer);
      s.pauseTimer = setTimeout(() => {
        s.pauseTimer = 0;
        s.pauseDue = true;
        frame();
      }, BRUSH_PAUSE_MS);
      frame();
      return;
    }
    e.currentTarget.style.cursor = axisAt(p.xs, x) >= 0 && y >= MARGIN.top - 12 ? "ns-resize" : "default";
    const passing = passMask(p, s.brushes);
    const hit = nearestRow(p, x, y, 6, (r) => passing[r]);
    if (hit !== s.hover) {
      s.hover = hit;
      callbacks.current.onHover?.(hit >= 0 ? p.rows[hit].id : null);
      frame();
    }
  };

  const onPointerUp = (e: React.PointerEvent<HTMLCanvasElement>) => {
    const s = live.current;
    const drag = s.drag;
    if (!drag) return;
    s.drag = null;
    brushDrag.end();
    if (!s.projection) return;
    if (s.pauseTimer) clearTimeout(s.pauseTimer);
    s.pauseTimer = 0;
    s.pauseDue = false;
    e.currentTarget.releasePointerCapture?.(e.pointerId);
    const scale = scaleOf(s.projection, drag);
    if (!scale) return; // its axis went while dragging
    const brush = drag.moved ? brushFromDrag(scale, drag.from, drag.to) : null;
    // A click (no drag) clears the axis; a drag sets (or replaces) its brush.
    if (JSON.stringify(brush) !== s.reported || !drag.moved) callbacks.current.onBrush(scale.axis.key, brush);
    s.reported = "";
    frame();
  };

  const onPointerLeave = () => {
    const s = live.current;
    if (s.drag || s.hover < 0) return;
    s.hover = -1;
    callbacks.current.onHover?.(null);
    frame();
  };

  const passing = useMemo(() => rows.filter((r) => passesBrushes(r, brushes)).length, [rows, brushes]);
  const brushed = Object.keys(brushes).filter((k) => axes.some((a) => a.key === k));

  return (
    <div className="viz-pc" data-rows={rows.length} data-passing={passing}>
      <div className="viz-pc-head">
        <span className="muted small">
          {brushed.length ? `${passing} of ${rows.length} runs inside the brushes` : `${rows.length} runs · drag along an axis to brush it`}
        </span>
        {brushed.length > 0 && (
          <button className="btn btn-sm" onClick={() => brushed.forEach((k) => onBrush(k, null))}>Clear brushes</button>
        )}
      </div>
      <div ref={host} className="viz-canvas-host" style={{ height }}>
        <canvas ref={canvas} className="viz-pc-lines" style={{ width: "100%", height }} role="img"
          aria-label={`Parallel coordinates: ${rows.length} runs over ${axes.map((a) => a.label).join(", ")}`}
          onPointerDown={onPointerDown} onPointerMove={onPointerMove} onPointerUp={onPointerUp}
          onPointerCancel={onPointerUp} onLostPointerCapture={onPointerUp} onPointerLeave={onPointerLeave} />
        <canvas ref={faintCanvas} className="viz-pc-faint" style={{ width: "100%", height }} aria-hidden="true" />
        <canvas ref={axesCanvas} className="viz-pc-axes" style={{ width: "100%", height }} aria-hidden="true" />
      </div>
      <BrushForm axes={axes} rows={rows} brushes={brushes} onBrush={onBrush} />
    </div>
  );
}

function scaleOf(p: Projection, drag: Drag): Scale | undefined {
  return p.scales.find((sc) => sc.axis.key === drag.key);
}

function clampY(y: number, height: number): number {
  return Math.min(Math.max(y, MARGIN.top), height - MARGIN.bottom);
}

function dragBrushes(p: Projection, brushes: Brushes, drag: Drag | null): Brushes {
  if (!drag?.moved) return brushes;
  const scale = scaleOf(p, drag);
  if (!scale) return brushes;
  const key = drag.key;
  const brush = brushFromDrag(scale, drag.from, drag.to);
  const out = { ...brushes };
  if (brush) out[key] = brush;
  else delete out[key];
  return out;
}

export function passMask(p: Projection, brushes: Brushes): boolean[] {
  return p.rows.map((r) => passesBrushes(r, brushes));
}

function highlightIndex(p: Projection, hover: number, highlight: string | null): number {
  if (hover >= 0) return hover;
  return highlight ? p.rows.findIndex((r) => r.id === highlight) : -1;
}

function tracePath(ctx: CanvasRenderingContext2D, p: Projection, r: number): void {
  const n = p.xs.length;
  let pen = false;
  for (let a = 0; a < n; a++) {
    const y = p.ys[r * n + a];
    if (Number.isNaN(y)) {
      pen = false;
      continue;
    }
    if (pen) ctx.lineTo(p.xs[a], y);
    else ctx.moveTo(p.xs[a], y);
    pen = true;
  }
}

function draw(ctx: CanvasRenderingContext2D, p: Projection, brushes: Brushes, colors: Map<string, string>, hi: number,
  t: ReturnType<typeof chartTheme>): void {
  const passing = passMask(p, brushes);
  // Runs inside the brushes, one path per colour (those outside show faint from the layer below).
  const byColor = new Map<string, number[]>();
  p.rows.forEach((row, r) => {
    if (!passing[r]) return;
    const c = colors.get(row.id) ?? FALLBACK_COLOR;
    const list = byColor.get(c) ?? [];
    list.push(r);
    byColor.set(c, list);
  });
  // 1 px: Skia draws a stroke no wider than a device pixel as a hairline; a wider one is
  // turned into a polygon and filled, several times the cost of a drag's frame for 200 runs.
  ctx.lineWidth = 1;
  for (const [c, list] of byColor) {
    ctx.globalAlpha = hi >= 0 ? 0.35 : 0.8;
    ctx.strokeStyle = c;
    ctx.beginPath();
    for (const r of list) tracePath(ctx, p, r);
    ctx.stroke();
  }
  ctx.globalAlpha = 1;
  if (hi >= 0) {
    ctx.lineWidth = 2.5;
    ctx.strokeStyle = colors.get(p.rows[hi].id) ?? FALLBACK_COLOR;
    ctx.beginPath();
    tracePath(ctx, p, hi);
    ctx.stroke();
  }
  // The brushes over the lines (the axes and their labels are on the canvas above).
  p.scales.forEach((scale, a) => {
    const brush = brushes[scale.axis.key];
    if (!brush) return;
    const x = Math.round(p.xs[a]) + 0.5;
    ctx.fillStyle = t.accent;
    ctx.strokeStyle = t.accent;
    ctx.lineWidth = 1;
    for (const [y0, y1] of brushSpans(scale, brush)) {
      ctx.globalAlpha = 0.22;
      ctx.fillRect(x - 7, y0, 14, Math.max(2, y1 - y0));
      ctx.globalAlpha = 1;
      ctx.strokeRect(x - 7, y0, 14, Math.max(2, y1 - y0));
    }
  });
}

/** Every run as one faint path, on the canvas under the lines: drawn only when the projection or the theme changes. */
function drawFaint(ctx: CanvasRenderingContext2D, p: Projection, t: ReturnType<typeof chartTheme>): void {
  ctx.lineWidth = 1;
  ctx.globalAlpha = 0.18;
  ctx.strokeStyle = t.axis;
  ctx.beginPath();
  for (let r = 0; r < p.rows.length; r++) tracePath(ctx, p, r);
  ctx.stroke();
  ctx.globalAlpha = 1;
}

/** The axes, their ticks and titles: on their own canvas, drawn only when the projection or the theme changes. */
function drawAxes(ctx: CanvasRenderingContext2D, p: Projection, t: ReturnType<typeof chartTheme>, width: number,
  height: number): void {
  const gap = p.xs.length > 1 ? p.xs[1] - p.xs[0] : width;
  ctx.font = t.fontSmall;
  p.scales.forEach((scale, a) => {
    const x = Math.round(p.xs[a]) + 0.5;
    ctx.strokeStyle = t.axis;
    ctx.lineWidth = 1;
    ctx.beginPath();
    ctx.moveTo(x, MARGIN.top);
    ctx.lineTo(x, height - MARGIN.bottom);
    ctx.stroke();
    ctx.fillStyle = t.muted;
    ctx.textAlign = a === p.scales.length - 1 ? "left" : "right";
    ctx.textBaseline = "middle";
    const ticks = scale.ticks();
    const every = Math.max(1, Math.ceil((ticks.length * 12) / Math.max(1, height - MARGIN.top - MARGIN.bottom)));
    const dx = a === p.scales.length - 1 ? 6 : -6;
    // Labels left of the axis (right of the last one): the first and last have only the margin.
    const room = (a === 0 || a === p.scales.length - 1 ? Math.min(gap / 2, MARGIN.left) : gap / 2) - 8;
    ctx.lineWidth = 3;
    ctx.strokeStyle = t.bg;
    ctx.lineJoin = "round";
    ticks.forEach((tick, i) => {
      if (i % every || room < 16) return; // too narrow for any label: none, rather than a row of "…"
      const label = fit(ctx, tick.label, room);
      // A halo in the background colour keeps the label readable over the lines.
      ctx.strokeText(label, x + dx, tick.px);
      ctx.fillText(label, x + dx, tick.px);
    });
    ctx.fillStyle = t.text;
    ctx.font = t.font;
    ctx.textAlign = a === 0 ? "left" : a === p.scales.length - 1 ? "right" : "center";
    ctx.textBaseline = "alphabetic";
    const titleRoom = a === 0 || a === p.scales.length - 1 ? gap / 2 + MARGIN.left - 8 : gap - 8;
    ctx.fillText(fit(ctx, scale.axis.label, titleRoom), a === 0 ? x - MARGIN.left + 4 : a === p.scales.length - 1 ? x + MARGIN.right - 4 : x,
      MARGIN.top - 16);
    ctx.font = t.fontSmall;
  });
}

/** The keyboard way to brush: per axis, a range (numbers) or a choice of values (categories). */
function BrushForm({ axes, rows, brushes, onBrush }: { axes: Axis[]; rows: VizRow[]; brushes: Brushes;
  onBrush: (key: string, brush: Brush | null) => void }) {
  // Rendered only while open: a drag re-renders the chart's owner each frame, and a closed form need not follow.
  const [open, setOpen] = useState(false);
  return (
    <details className="viz-pc-keys" onToggle={(e) => setOpen(e.currentTarget.open)}>
      <summary>Set brushes by keyboard</summary>
      {open && <div className="viz-pc-form">
        {axes.map((axis) => (axis.kind === "category"
          ? <SetForm key={axis.key} axis={axis} rows={rows} brush={brushes[axis.key]} onBrush={onBrush} />
          : <RangeForm key={`${axis.key}:${JSON.stringify(brushes[axis.key] ?? null)}`} axis={axis} brush={brushes[axis.key]}
            onBrush={onBrush} />))}
      </div>}
    </details>
  );
}

function RangeForm({ axis, brush, onBrush }: { axis: Axis; brush: Brush | undefined; onBrush: (key: string, b: Brush | null) => void }) {
  const range = brush?.kind === "range" ? brush : null;
  const submit = (e: FormEvent<HTMLFormElement>) => {
    e.preventDefault();
    const data = new FormData(e.currentTarget);
    const lo = String(data.get("min") ?? "").trim();
    const hi = String(data.get("max") ?? "").trim();
    if (!lo && !hi) return onBrush(axis.key, null);
    onBrush(axis.key, rangeBrush(lo ? Number(lo) : -Number.MAX_VALUE, hi ? Number(hi) : Number.MAX_VALUE));
  };
  return (
    <form className="viz-pc-row" onSubmit={submit} data-axis={axis.key}>
      <span className="viz-pc-axis" title={axis.label}>{axis.label}</span>
      <input name="min" type="number" step="any" defaultValue={range && range.min > -Number.MAX_VALUE ? fmtTick(range.min) : ""}
        aria-label={`${axis.label}: from`} placeholder="from" />
      <input name="max" type="number" step="any" defaultValue={range && range.max < Number.MAX_VALUE ? fmtTick(range.max) : ""}
        aria-label={`${axis.label}: to`} placeholder="to" />
      <button className="btn btn-sm" type="submit">Apply</button>
      {range && <button className="btn btn-sm" type="button" onClick={() => onBrush(axis.key, null)}
        aria-label={`Clear the brush on ${axis.label}`}>Clear</button>}
    </form>
  );
}

function SetForm({ axis, rows, brush, onBrush }: { axis: Axis; rows: VizRow[]; brush: Brush | undefined;
  onBrush: (key: string, b: Brush | null) => void }) {
  const categories = axis.categories ?? categoriesOf(rows, axis.key);
  const chosen = new Set(brush?.kind === "set" ? brush.values : []);
  const toggle = (c: string) => {
    const next = new Set(chosen);
    if (next.has(c)) next.delete(c);
    else next.add(c);
    onBrush(axis.key, next.size ? { kind: "set", values: categories.filter((v) => next.has(v)) } : null);
  };
  return (
    <fieldset className="viz-pc-row" data-axis={axis.key}>
      <legend className="viz-pc-axis" title={axis.label}>{axis.label}</legend>
      {categories.map((c) => (
        <label key={c} className="viz-pc-choice">
          <input type="checkbox" checked={chosen.has(c)} onChange={() => toggle(c)} />{categoryLabel(c)}
        </label>
      ))}
    </fieldset>
  );
}
