// The names of node readings, as the node metrics API names them and as the snapshot holds them.

import type { GpuReading, NodeSnapshot } from "../api/types";

export const GPU_FIELDS = [
  { metric: "utilization", label: "Util", unit: "%", read: (g: GpuReading) => g.utilization_pct },
  { metric: "memory_used_mb", label: "Memory", unit: "MiB", read: (g: GpuReading) => g.memory_used_mb },
  { metric: "temperature_c", label: "Temp", unit: "°C", read: (g: GpuReading) => g.temperature_c },
  { metric: "power_w", label: "Power", unit: "W", read: (g: GpuReading) => g.power_w },
] as const;

export type GpuMetric = (typeof GPU_FIELDS)[number]["metric"];

export function gpuKey(nodeId: string, index: number, metric: string): string {
  return `${nodeId}/gpu${index}.${metric}`;
}

export function hostKey(nodeId: string, metric: string): string {
  return `${nodeId}/host.${metric}`;
}

/** Every sparkline value a snapshot carries, as [key, value] pairs. */
export function snapshotPoints(nodeId: string, snap: NodeSnapshot): [string, number | null][] {
  const out: [string, number | null][] = [];
  for (const g of snap.gpus) {
    for (const f of GPU_FIELDS) out.push([gpuKey(nodeId, g.index, f.metric), f.read(g)]);
  }
  if (snap.host) {
    out.push([hostKey(nodeId, "cpu_percent"), snap.host.cpu_percent]);
    out.push([hostKey(nodeId, "memory_used_mb"), snap.host.memory_used_mb]);
  }
  return out;
}
