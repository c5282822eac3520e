// Axis helpers: a y axis as wide as its longest tick label (uPlot's documented pattern).

import type uPlot from "uplot";

export function autoSize(u: uPlot, values: string[] | null, axisIdx: number, cycleNum: number): number {
  const axis = u.axes[axisIdx] as uPlot.Axis & { _size?: number };
  if (cycleNum > 1 && axis._size) return axis._size;
  let size = (axis.ticks?.size ?? 4) + (axis.gap ?? 5) + 4;
  const longest = (values ?? []).reduce((acc, v) => (v.length > acc.length ? v : acc), "");
  if (longest) {
    u.ctx.font = Array.isArray(axis.font) ? String(axis.font[0]) : String(axis.font ?? "11px sans-serif");
    size += u.ctx.measureText(longest).width / (window.devicePixelRatio || 1);
  }
  return Math.ceil(size);
}
