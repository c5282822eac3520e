// A small live chart for a card: one series from a LiveStore key, no axes, a fixed y
// range when the reading has one (utilization 0-100 %), the latest value beside it.

import { useCallback, useEffect, useMemo, useRef } from "react";
import uPlot from "uplot";
import { withAlpha } from "./colors";
import type { LiveStore } from "./live";
import { UPlotChart } from "./UPlotChart";

export interface SparklineProps {
  store: LiveStore;
  storeKey: string;
  color: string;
  /** Fixed y range; absent: fit the data. */
  range?: [number, number];
  height?: number;
  theme: string;
  syncKey?: string;
}

export function Sparkline({ store, storeKey, color, range, height = 28, theme, syncKey }: SparklineProps) {
  const chart = useRef<uPlot | null>(null);
  const lo = range?.[0];
  const hi = range?.[1];
  const options = useMemo<Omit<uPlot.Options, "width" | "height">>(() => ({
    ms: 1,
    pxAlign: 0,
    padding: [2, 0, 2, 0],
    legend: { show: false },
    cursor: { show: !!syncKey, x: true, y: false, points: { show: false }, drag: { x: false, y: false },
      sync: syncKey ? { key: syncKey } : undefined },
    select: { show: false, left: 0, top: 0, width: 0, height: 0 },
    scales: {
      x: { time: true },
      y: lo !== undefined && hi !== undefined ? { range: [lo, hi] } : {
        range: (_u, min, max) => (min === max ? [min - 1, max + 1] : [min, max + (max - min) * 0.1]),
      },
    },
    axes: [{ show: false }, { show: false }],
    series: [{}, { stroke: color, width: 1.25, fill: withAlpha(color, 0.14), spanGaps: false, points: { show: false } }],
  }), [color, lo, hi, theme, syncKey]); // eslint-disable-line react-hooks/exhaustive-deps

  const apply = useCallback(() => {
    const u = chart.current;
    if (!u) return;
    const r = store.get(storeKey);
    const now = r.x.length ? r.x[r.x.length - 1] : Date.now();
    u.setData([r.x, r.y], false);
    u.setScale("x", { min: now - store.windowMs, max: now });
  }, [store, storeKey]);

  useEffect(() => store.subscribe(storeKey, apply), [store, storeKey, apply]);
  const onChart = useCallback((u: uPlot | null) => {
    chart.current = u;
    if (u) apply();
  }, [apply]);

  return <UPlotChart options={options} height={height} onChart={onChart} className="sparkline" />;
}
