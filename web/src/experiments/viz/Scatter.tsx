// A scatter of one key against another (the metric summary against a config key, as a
// rule): a dot per run in its colour, runs outside the brushes faint, hover names the run.
// On a canvas; a category x axis spreads its dots a little (by run id, so they stay put).

import { useEffect, useMemo, useRef } from "react";
import { hash } from "../../charts/colors";
import { chartTheme } from "../../charts/theme";
import { fmtValue } from "../../lib/format";
import { useTheme } from "../../lib/theme";
import { categoryLabel, passesBrushes } from "./brush";
import { fit, localPoint, prepare, useFrame, useWidth } from "./canvas";
import { makeScale, type Scale } from "./scale";
import type { Axis, Brushes, VizRow } from "./types";

export interface ScatterProps {
  rows: VizRow[];
  x: Axis;
  y: Axis;
  colors: Map<string, string>;
  brushes: Brushes;
  onHover?: (id: string | null) => void;
  highlight?: string | null;
  /** How a run is named in the hover readout (its id otherwise). */
  labels?: Map<string, string>;
  height?: number;
}

const MARGIN = { top: 10, right: 16, bottom: 36, left: 56 };

export interface Dots {
  xs: Float32Array;
  ys: Float32Array;
  passing: boolean[];
  sx: Scale;
  sy: Scale;
}

/** Every run's dot in pixels (NaN where it has no value on an axis), and whether it is inside the brushes. */
export function placeDots(rows: readonly VizRow[], x: Axis, y: Axis, brushes: Brushes, width: number, height: number): Dots {
  const sx = makeScale(x, rows, MARGIN.left, width - MARGIN.right);
  const sy = makeScale(y, rows, height - MARGIN.bottom, MARGIN.top);
  const xs = new Float32Array(rows.length);
  const ys = new Float32Array(rows.length);
  const band = x.kind === "category" ? (width - MARGIN.left - MARGIN.right) / Math.max(1, sx.categories.length) : 0;
  rows.forEach((r, i) => {
    const jitter = band ? ((hash(r.id) % 1000) / 1000 - 0.5) * band * 0.5 : 0;
    xs[i] = sx.toPx(r.values[x.key]) + jitter;
    ys[i] = sy.toPx(r.values[y.key]);
  });
  return { xs, ys, passing: rows.map((r) => passesBrushes(r, brushes)), sx, sy };
}

/** The dot nearest (px, py) within `reach` pixels, or -1. */
export function nearestDot(d: Dots, px: number, py: number, reach = 8): number {
  let best = -1;
  let bestD = reach * reach;
  for (let i = 0; i < d.xs.length; i++) {
    const dx = d.xs[i] - px;
    const dy = d.ys[i] - py;
    const dist = dx * dx + dy * dy;
    if (dist <= bestD) {
      best = i;
      bestD = dist;
    }
  }
  return best;
}

export function Scatter({ rows, x, y, colors, brushes, onHover, highlight = null, labels, height = 260 }: ScatterProps) {
  const [host, width] = useWidth<HTMLDivElement>();
  const canvas = useRef<HTMLCanvasElement>(null);
  const tip = useRef<HTMLDivElement>(null);
  const { theme } = useTheme();
  const colours = useMemo(() => chartTheme(), [theme]); // eslint-disable-line react-hooks/exhaustive-deps
  const dots = useMemo(() => (width > 0 ? placeDots(rows, x, y, brushes, width, height) : null), [rows, x, y, brushes, width, height]);
  const live = useRef({ dots, hover: -1, highlight, colors, colours });
  Object.assign(live.current, { dots, highlight, colors, colours });
  const hoverRef = useRef(onHover);
  hoverRef.current = onHover;

  const frame = useFrame(() => {
    const s = live.current;
    if (!canvas.current || !s.dots) return;
    const ctx = prepare(canvas.current, width, height);
    if (!ctx) return;
    const hi = s.hover >= 0 ? s.hover : s.highlight ? rows.findIndex((r) => r.id === s.highlight) : -1;
    drawScatter(ctx, s.dots, rows, s.colors, hi, s.colours, width, height);
  });
  useEffect(() => frame(), [frame, dots, highlight, colors, colours]);

  const onMove = (e: React.PointerEvent<HTMLCanvasElement>) => {
    const s = live.current;
    if (!s.dots) return;
    const [px, py] = localPoint(e, e.currentTarget);
    const hit = nearestDot(s.dots, px, py);
    if (hit === s.hover) return;
    s.hover = hit;
    hoverRef.current?.(hit >= 0 ? rows[hit].id : null);
    const el = tip.current;
    if (el) {
      if (hit < 0) el.hidden = true;
      else {
        const r = rows[hit];
        el.hidden = false;
        el.textContent = `${labels?.get(r.id) ?? r.id} · ${x.label} ${show(r.values[x.key])} · ${y.label} ${show(r.values[y.key])}`;
        el.style.left = `${Math.min(s.dots.xs[hit] + 10, width - 200)}px`;
        el.style.top = `${Math.max(0, s.dots.ys[hit] - 28)}px`;
      }
    }
    frame();
  };
  const onLeave = () => {
    if (live.current.hover < 0) return;
    live.current.hover = -1;
    if (tip.current) tip.current.hidden = true;
    hoverRef.current?.(null);
    frame();
  };

  const placed = dots ? rows.filter((_, i) => !Number.isNaN(dots.xs[i]) && !Number.isNaN(dots.ys[i])).length : 0;
  return (
    <div ref={host} className="viz-scatter viz-canvas-host" style={{ height }} data-rows={rows.length} data-placed={placed}>
      <canvas ref={canvas} style={{ width: "100%", height }} role="img"
        aria-label={`Scatter of ${y.label} against ${x.label}: ${rows.length} runs`} onPointerMove={onMove} onPointerLeave={onLeave} />
      <div ref={tip} className="viz-tip" hidden />
    </div>
  );
}

function show(v: VizRow["values"][string] | undefined): string {
  return typeof v === "number" ? fmtValue(v) : categoryLabel(v);
}

function drawScatter(ctx: CanvasRenderingContext2D, d: Dots, rows: readonly VizRow[], colors: Map<string, string>, hi: number,
  t: ReturnType<typeof chartTheme>, width: number, height: number): void {
  const bottom = height - MARGIN.bottom;
  // Grid and axes.
  ctx.font = t.fontSmall;
  ctx.lineWidth = 1;
  ctx.fillStyle = t.muted;
  ctx.strokeStyle = t.grid;
  ctx.textAlign = "right";
  ctx.textBaseline = "middle";
  for (const tick of d.sy.ticks()) {
    ctx.beginPath();
    ctx.moveTo(MARGIN.left, Math.round(tick.px) + 0.5);
    ctx.lineTo(width - MARGIN.right, Math.round(tick.px) + 0.5);
    ctx.stroke();
    ctx.fillText(fit(ctx, tick.label, MARGIN.left - 8), MARGIN.left - 6, tick.px);
  }
  ctx.textAlign = "center";
  ctx.textBaseline = "top";
  const xt = d.sx.ticks();
  const room = (width - MARGIN.left - MARGIN.right) / Math.max(1, xt.length);
  const every = Math.max(1, Math.ceil(40 / Math.max(1, room)));
  xt.forEach((tick, i) => {
    ctx.beginPath();
    ctx.moveTo(Math.round(tick.px) + 0.5, MARGIN.top);
    ctx.lineTo(Math.round(tick.px) + 0.5, bottom);
    ctx.stroke();
    if (i % every === 0) ctx.fillText(fit(ctx, tick.label, room * every - 4), tick.px, bottom + 4);
  });
  ctx.fillStyle = t.text;
  ctx.font = t.font;
  ctx.fillText(fit(ctx, d.sx.axis.label, width - MARGIN.left - MARGIN.right), (MARGIN.left + width - MARGIN.right) / 2, bottom + 19);
  ctx.save();
  ctx.translate(12, (MARGIN.top + bottom) / 2);
  ctx.rotate(-Math.PI / 2);
  ctx.textBaseline = "middle";
  ctx.fillText(fit(ctx, d.sy.axis.label, bottom - MARGIN.top), 0, 0);
  ctx.restore();
  // Dots: the brushed-out ones first and faint, then the rest, then the hovered one.
  const dot = (i: number, r: number) => {
    ctx.beginPath();
    ctx.arc(d.xs[i], d.ys[i], r, 0, Math.PI * 2);
    ctx.fill();
  };
  ctx.globalAlpha = 0.18;
  ctx.fillStyle = t.axis;
  rows.forEach((_, i) => {
    if (!d.passing[i] && !Number.isNaN(d.xs[i]) && !Number.isNaN(d.ys[i])) dot(i, 3);
  });
  ctx.globalAlpha = hi >= 0 ? 0.45 : 0.85;
  rows.forEach((r, i) => {
    if (!d.passing[i] || Number.isNaN(d.xs[i]) || Number.isNaN(d.ys[i])) return;
    ctx.fillStyle = colors.get(r.id) ?? "#888888";
    dot(i, 3.5);
  });
  ctx.globalAlpha = 1;
  if (hi >= 0 && !Number.isNaN(d.xs[hi]) && !Number.isNaN(d.ys[hi])) {
    ctx.fillStyle = colors.get(rows[hi].id) ?? "#888888";
    ctx.strokeStyle = t.text;
    ctx.lineWidth = 1.5;
    dot(hi, 5.5);
    ctx.stroke();
  }
}
