// A node's system metrics over a time window (a run's, or the last hour on the Nodes
// page): GPU utilization, memory, temperature and power per GPU, host CPU and memory.
// Crosshairs are synced. A live window follows the node's stream (GET /nodes/{node}/stream):
// each snapshot is appended to the fetched series; it is refetched on a timer only while that
// stream is down, and once more when it is back (the readings it missed).

import { useMemo } from "react";
import uPlot from "uplot";
import { type Span, useFollowedNodeMetrics } from "../api/nodeStream";
import type { NodeMetrics } from "../api/types";
import { Empty, ErrorBanner } from "../components/ui";
import { fmtMiB, fmtPct, fmtTimeTicks } from "../lib/format";
import { useTheme } from "../lib/theme";
import { PALETTE } from "./colors";
import { autoSize } from "./axis";
import { chartTheme } from "./theme";
import { UPlotChart } from "./UPlotChart";

interface Panel {
  title: string;
  metric: string; // gpu<N>.<metric> or host.<metric>
  gpu: boolean;
  fmt: (v: number | null) => string;
  range?: [number, number];
}

const PANELS: Panel[] = [
  { title: "GPU utilization", metric: "utilization", gpu: true, fmt: (v) => fmtPct(v), range: [0, 100] },
  { title: "GPU memory", metric: "memory_used_mb", gpu: true, fmt: (v) => fmtMiB(v) },
  { title: "GPU temperature", metric: "temperature_c", gpu: true, fmt: (v) => (v === null ? "—" : `${Math.round(v)}°C`) },
  { title: "GPU power", metric: "power_w", gpu: true, fmt: (v) => (v === null ? "—" : `${Math.round(v)} W`) },
  { title: "CPU", metric: "cpu_percent", gpu: false, fmt: (v) => fmtPct(v), range: [0, 100] },
  { title: "Host memory", metric: "memory_used_mb", gpu: false, fmt: (v) => fmtMiB(v) },
];

export function gpuIndexesIn(m: NodeMetrics): number[] {
  const found = new Set<number>();
  for (const name of Object.keys(m.series)) {
    const match = /^gpu(\d+)\./.exec(name);
    if (match) found.add(Number(match[1]));
  }
  return [...found].sort((a, b) => a - b);
}

export type { Span };

export function SystemCharts({ nodeId, span, gpus, syncKey, pollMs = 5000 }: {
  nodeId: string; span: Span; gpus: number[] | null; syncKey: string;
  /** The refetch period while the node's stream is down. */
  pollMs?: number }) {
  const { theme } = useTheme();
  const names = useMemo(() => {
    const g = gpus === null ? ["gpu*"] : gpus.map((i) => `gpu${i}`);
    return [...PANELS.filter((p) => p.gpu).flatMap((p) => g.map((x) => `${x}.${p.metric}`)), "host.cpu_percent",
      "host.memory_used_mb"];
  }, [gpus]);
  const metrics = useFollowedNodeMetrics(nodeId, span, names, pollMs);

  if (metrics.error && !metrics.data) return <ErrorBanner error={metrics.error} onRetry={metrics.reload} />;
  const m = metrics.data;
  if (!m) return <div className="chart-grid">{PANELS.map((p) => <div key={p.title} className="panel chart-skeleton" />)}</div>;
  if (!m.x.length) {
    return <Empty title="No system readings for this window" icon="nodes">
      The node kept no samples between these times (raw samples are kept 24 h, then 1-minute and 5-minute rollups).
    </Empty>;
  }
  const indexes = gpus ?? gpuIndexesIn(m);
  return (
    <div className="chart-grid system-grid">
      {PANELS.filter((p) => !p.gpu || indexes.length).map((p) => (
        <SystemPanel key={p.title} panel={p} data={m} gpus={indexes} theme={theme} syncKey={syncKey} />
      ))}
    </div>
  );
}

function SystemPanel({ panel, data, gpus, theme, syncKey }: { panel: Panel; data: NodeMetrics; gpus: number[]; theme: string;
  syncKey: string }) {
  const keys = panel.gpu ? gpus.map((i) => `gpu${i}.${panel.metric}`) : [`host.${panel.metric}`];
  const labels = panel.gpu ? gpus.map((i) => `GPU ${i}`) : [panel.title];
  const options = useMemo<Omit<uPlot.Options, "width" | "height">>(() => {
    const t = chartTheme();
    const axis = { stroke: t.axis, font: t.font, grid: { stroke: t.grid, width: 1 }, ticks: { stroke: t.grid, width: 1, size: 4 } };
    return {
      ms: 1,
      legend: { show: true, live: true },
      cursor: { sync: { key: syncKey }, drag: { x: false, y: false }, points: { size: 5 } },
      padding: [8, 14, 0, 0],
      scales: { x: { time: true }, y: panel.range ? { range: panel.range } : {} },
      axes: [
        // HH:MM:SS labels need about 60 px each.
        { ...axis, size: 28, space: 80, values: (u, splits) => fmtTimeTicks(splits, (u.scales.x.max ?? 0) - (u.scales.x.min ?? 0)) },
        { ...axis, size: autoSize, values: (_u, splits) => splits.map((v) => panel.fmt(v)),
          ...(panel.metric === "memory_used_mb" ? { incrs: MIB_INCRS } : {}) },
      ],
      // The legend shows the hovered time's values, else the latest reading of each series.
      series: [
        {},
        ...labels.map((label, i) => ({
          label, stroke: panel.gpu ? PALETTE[gpus[i] % PALETTE.length] : PALETTE[0], width: 1.25, spanGaps: false,
          points: { show: false },
          value: (u: uPlot, v: number | null, sidx: number, idx: number | null) =>
            panel.fmt(idx === null ? lastOf(u.data[sidx] as (number | null)[]) : v),
        })),
      ],
    };
  }, [keys.join(","), theme, syncKey]); // eslint-disable-line react-hooks/exhaustive-deps
  const aligned = useMemo<uPlot.AlignedData>(
    () => [data.x, ...keys.map((k) => data.series[k]?.avg ?? new Array(data.x.length).fill(null))],
    [data, keys.join(",")], // eslint-disable-line react-hooks/exhaustive-deps
  );
  const latest = keys.map((k) => {
    const col = data.series[k]?.last ?? [];
    for (let i = col.length - 1; i >= 0; i--) if (col[i] !== null) return col[i];
    return null;
  });
  return (
    <div className="panel chart-panel system-panel">
      <div className="chart-head">
        <span className="chart-title">{panel.title}</span>
        <span className="muted small mono">{keys.length === 1 ? panel.fmt(latest[0]) : `max ${panel.fmt(maxOf(latest))}`}</span>
      </div>
      <UPlotChart options={options} data={aligned} height={150} />
    </div>
  );
}

/** Memory axes step in binary units: 256 MiB ... 512 GiB (never "19.5 GiB"). */
const MIB_INCRS = Array.from({ length: 12 }, (_, i) => 256 * 2 ** i);

function lastOf(values: (number | null)[] | undefined): number | null {
  if (!values) return null;
  for (let i = values.length - 1; i >= 0; i--) if (values[i] !== null && values[i] !== undefined) return values[i];
  return null;
}

function maxOf(values: (number | null)[]): number | null {
  let best: number | null = null;
  for (const v of values) if (v !== null && (best === null || v > best)) best = v;
  return best;
}

