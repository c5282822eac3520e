// Number, time, size and duration formatting for dense tables and chart readouts.

const compact = new Intl.NumberFormat(undefined, { maximumFractionDigits: 1, notation: "compact" });
const grouped = new Intl.NumberFormat(undefined, { maximumFractionDigits: 0 });

export function fmtInt(n: number | null | undefined): string {
  return n === null || n === undefined || !Number.isFinite(n) ? "—" : grouped.format(n);
}

export function fmtCompact(n: number | null | undefined): string {
  return n === null || n === undefined || !Number.isFinite(n) ? "—" : compact.format(n);
}

/** A metric value: 4 significant digits, exponent form for tiny or huge magnitudes. */
export function fmtValue(v: number | null | undefined): string {
  if (v === null || v === undefined) return "—";
  if (Number.isNaN(v)) return "NaN";
  if (!Number.isFinite(v)) return v > 0 ? "∞" : "−∞";
  const a = Math.abs(v);
  if (a === 0) return "0";
  if (a >= 1e6 || a < 1e-3) return v.toExponential(3).replace("e+", "e");
  if (Number.isInteger(v)) return String(v);
  if (a >= 1000) return String(Number(v.toFixed(a >= 1e4 ? 0 : 1))); // all the integer digits
  return Number(v.toPrecision(4)).toString();
}

export function fmtPct(v: number | null | undefined, digits = 0): string {
  return v === null || v === undefined ? "—" : `${v.toFixed(digits)}%`;
}

export function fmtBytes(bytes: number | null | undefined): string {
  if (bytes === null || bytes === undefined || !Number.isFinite(bytes)) return "—";
  const units = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
  let v = bytes;
  let i = 0;
  while (Math.abs(v) >= 1024 && i < units.length - 1) {
    v /= 1024;
    i++;
  }
  return `${v >= 100 || i === 0 ? v.toFixed(0) : v.toFixed(1)} ${units[i]}`;
}

export function fmtMiB(mb: number | null | undefined): string {
  return mb === null || mb === undefined ? "—" : fmtBytes(mb * 1024 * 1024);
}

export function fmtDuration(ms: number | null | undefined): string {
  if (ms === null || ms === undefined || !Number.isFinite(ms) || ms < 0) return "—";
  const s = Math.floor(ms / 1000);
  if (s < 60) return `${s}s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m}m ${String(s % 60).padStart(2, "0")}s`;
  const h = Math.floor(m / 60);
  if (h < 48) return `${h}h ${String(m % 60).padStart(2, "0")}m`;
  return `${Math.floor(h / 24)}d ${h % 24}h`;
}

export function fmtAgo(ts: number | null | undefined, now = Date.now()): string {
  if (ts === null || ts === undefined) return "—";
  const d = now - ts;
  if (d < 0) return "just now";
  if (d < 5_000) return "just now";
  if (d < 60_000) return `${Math.floor(d / 1000)}s ago`;
  if (d < 3_600_000) return `${Math.floor(d / 60_000)}m ago`;
  if (d < 86_400_000) return `${Math.floor(d / 3_600_000)}h ago`;
  return `${Math.floor(d / 86_400_000)}d ago`;
}

const dateTime = new Intl.DateTimeFormat(undefined, {
  month: "short", day: "numeric", hour: "2-digit", minute: "2-digit", second: "2-digit", hour12: false,
});
const timeOnly = new Intl.DateTimeFormat(undefined, { hour: "2-digit", minute: "2-digit", second: "2-digit", hour12: false });

export function fmtTime(ts: number | null | undefined): string {
  if (ts === null || ts === undefined) return "—";
  const d = new Date(ts);
  return new Date().toDateString() === d.toDateString() ? timeOnly.format(d) : dateTime.format(d);
}

export function fmtDateTime(ts: number | null | undefined): string {
  return ts === null || ts === undefined ? "—" : dateTime.format(new Date(ts));
}

/** A Slurm node's capacity (Slurm places each job's GPUs): said the way `gpuplanectl node show` says it. */
export function pooledCapacity(p: { gpus_per_job: number; max_jobs: number; jobs_in_flight: number }): string {
  return `up to ${p.gpus_per_job} GPUs a job, ${p.max_jobs} jobs at once, ${p.jobs_in_flight} in flight`;
}

/** When a node was last heard from: its heartbeat or its latest sample, whichever is newer. */
export function lastSeen(node: { last_heartbeat_at: number | null; snapshot: { ts: number } | null }): number | null {
  const t = Math.max(node.last_heartbeat_at ?? 0, node.snapshot?.ts ?? 0);
  return t || null;
}

export function shortId(id: string | null | undefined): string {
  if (!id) return "—";
  const under = id.indexOf("_");
  const body = under >= 0 ? id.slice(under + 1) : id;
  return body.length > 8 ? `${id.slice(0, under + 1)}…${body.slice(-6)}` : id;
}

/** Training logs carry ANSI colors and carriage-return progress bars: show what a terminal would. */
export function cleanLogLine(line: string): string {
  // eslint-disable-next-line no-control-regex
  let text = line.replace(/\x1b\[[0-9;?]*[ -/]*[@-~]/g, "").replace(/\x1b\][^\x07]*(\x07|\x1b\\)/g, "");
  const cr = text.lastIndexOf("\r", text.length - 2);
  if (cr >= 0) text = text.slice(cr + 1);
  return text.replace(/\r$/, "");
}

/** An axis tick: as short as the value allows (3e-4, 2.5e-4, 0.25, 1500, 2.5M). */
export function fmtTick(v: number | null): string {
  // uPlot hands null for the ticks it leaves unlabelled (log scales).
  if (v === null || !Number.isFinite(v)) return "";
  if (v === 0) return "0";
  const a = Math.abs(v);
  if (a >= 1e6 || a < 1e-3) {
    const [m, e] = v.toExponential(2).split("e");
    return `${Number(m)}e${Number(e)}`;
  }
  return String(Number(v.toPrecision(4)));
}

/** Time-axis ticks (ms): clock times for a short range, dates for a long one. */
export function fmtTimeTicks(splits: (number | null)[], rangeMs: number): string[] {
  const pad = (n: number) => String(n).padStart(2, "0");
  return splits.map((ms) => {
    if (ms === null) return "";
    const d = new Date(ms);
    if (rangeMs < 10_000) return `${pad(d.getMinutes())}:${pad(d.getSeconds())}.${String(d.getMilliseconds()).padStart(3, "0")}`;
    if (rangeMs > 3 * 86_400_000) return `${d.toLocaleString(undefined, { month: "short" })} ${d.getDate()}`;
    if (rangeMs > 86_400_000) return `${d.getDate()} ${pad(d.getHours())}:${pad(d.getMinutes())}`;
    if (rangeMs < 5 * 60_000) return `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
    return `${pad(d.getHours())}:${pad(d.getMinutes())}`;
  });
}
