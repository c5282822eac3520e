// Compare: the same metrics overlaid across the chosen runs, one stable color per run,
// with a side-by-side summary table marking the best run per metric. The run list, the
// axis, smoothing, filter and zoom are in the URL, so a comparison is a link. Live runs
// follow one metric stream for them all; their summaries are refreshed from what it brings
// (throttled), and polled for only while it is down. The runs' records and events are fetched
// again when the daemon's changes stream names them.

import { useEffect, useMemo, useRef, useState } from "react";
import { api } from "../api/client";
import { useResource } from "../api/hooks";
import { KeyedThrottle } from "../api/pushedByStream";
import type { StreamState } from "../api/sse";
import type { GpuEvent, Run, RunSummary } from "../api/types";
import { colorsFor } from "../charts/colors";
import { FallbackPoll } from "../charts/fallbackPoll";
import { useMetricsLoader } from "../charts/loader";
import { GridToolbar, MetricsGrid } from "../charts/MetricsGrid";
import { SeriesStore } from "../charts/series";
import { Icon } from "../components/Icon";
import { Empty, PageHeader, StatusBadge } from "../components/ui";
import { fmtInt, fmtValue } from "../lib/format";
import { compareMarks } from "../lib/marks";
import { runLabel } from "../lib/runs";
import { useSummaries } from "../lib/summaries";
import { Link, useUrlState } from "../router/router";
import { bool, list, num, oneOf, range, str } from "../router/urlState";

const MAX_RUNS = 50; // POST /runs/metrics:query takes at most 50
const SUMMARY_MS = 3000; // a live run's summary is asked at most this often as its points are announced
const SUMMARY_POLL_MS = 15_000; // and this often while the metric stream is down
const schema = {
  runs: list(), x: oneOf(["step", "ts"] as const, "step"), smooth: num(0.6, 0, 0.99), m: str(), xr: range(), logy: bool(false),
};

export function Compare() {
  const [view, setView] = useUrlState(schema);
  const ids = useMemo(() => [...new Set(view.runs)].slice(0, MAX_RUNS), [view.runs]);
  const key = ids.join(",");
  const store = useMemo(() => new SeriesStore(), []);
  useEffect(() => () => store.dispose(), [store]);
  const runs = useResource(async (signal) => {
    const out = new Map<string, Run>();
    await Promise.all(ids.map((id) => api.getRun(id, signal).then((r) => out.set(id, r), () => undefined)));
    return out;
  }, [key], { live: ["runs"], pollMs: 10_000, liveGapMs: 10_000 }); // a request per run
  const colors = useMemo(() => colorsFor(ids), [key]); // eslint-disable-line react-hooks/exhaustive-deps
  const live = ids.filter((id) => runs.data?.get(id)?.status === "RUNNING");
  const known = runs.data ? ids.filter((id) => runs.data!.has(id)) : ids;
  const pushed = usePushedSummaries(live);
  const loader = useMetricsLoader({ store, runs: known, x: view.x, zoom: view.xr, live, onPoints: pushed.onPoints,
    onStreamState: pushed.onStreamState });
  const fetched = useSummaries(ids, []);
  const summaries = new Map(ids.flatMap((id) => {
    const s = pushed.fresh.get(id) ?? fetched.get(id);
    return s ? [[id, s] as const] : [];
  }));
  const panelRuns = useMemo(() => known.map((id) => ({ id, label: runLabel(runs.data?.get(id), id), color: colors.get(id)! })),
    [known.join(","), runs.data, colors]); // eslint-disable-line react-hooks/exhaustive-deps
  const missing = runs.data ? ids.filter((id) => !runs.data!.has(id)) : [];
  // Each run's warnings, criticals and checkpoints, marked on the charts in the run's color.
  const events = useResource(async (signal) => {
    const out = new Map<string, GpuEvent[]>();
    await Promise.all(ids.map((id) => api.listEvents({ run_id: id, limit: 200 }, signal).then((p) => out.set(id, p.events),
      () => undefined)));
    return out;
  }, [key], live.length ? { live: ["events"], pollMs: 15_000, liveGapMs: 15_000 } : {}); // ended runs get no new events
  const marks = useMemo(() => compareMarks(events.data ?? new Map(), colors,
    new Map(panelRuns.map((r) => [r.id, r.label])), view.x), [events.data, colors, panelRuns, view.x]);

  const remove = (id: string) => setView({ runs: ids.filter((r) => r !== id) }, { push: true });
  const add = (id: string) => setView({ runs: [...ids, id] }, { push: true });

  return (
    <div className="page">
      <PageHeader title="Compare" sub={ids.length ? `${ids.length} run${ids.length === 1 ? "" : "s"}` : undefined} />
      <div className="compare-runs">
        {ids.map((id) => {
          const r = runs.data?.get(id);
          return (
            <span key={id} className="run-chip" style={{ borderColor: colors.get(id) }}>
              <i style={{ background: colors.get(id) }} />
              <Link to={`/runs/${id}`}>{runLabel(r, id)}</Link>
              {r && <StatusBadge status={r.status} />}
              <button className="icon-btn" onClick={() => remove(id)} aria-label={`Remove ${runLabel(r, id)}`}><Icon name="x" size={12} /></button>
            </span>
          );
        })}
        {ids.length < MAX_RUNS && <RunPicker exclude={ids} onPick={add} />}
      </div>
      {missing.length > 0 && <div className="banner banner-warn"><Icon name="alert" />Not found: {missing.join(", ")}</div>}
      {!ids.length ? (
        <Empty title="Pick runs to compare" icon="compare">
          Add runs above, or select them on the <Link to="/runs">Runs</Link> page and press Compare.
        </Empty>
      ) : (
        <>
          <SummaryTable ids={known} runs={runs.data} summaries={summaries} colors={colors} />
          <GridToolbar view={view} setView={setView} names={store.names().length} width={loader.width} />
          <MetricsGrid store={store} runs={panelRuns} view={view} setView={setView} syncKey="compare" loading={loader.loading}
            error={loader.error} marks={marks} emptyHint="None of these runs has logged metrics." />
        </>
      )}
    </div>
  );
}

/** Live runs' summaries, asked again when their stream announces points (at most every SUMMARY_MS
 * per run), and every SUMMARY_POLL_MS only while that stream is down. */
export function usePushedSummaries(live: readonly string[]) {
  const [fresh, setFresh] = useState(() => new Map<string, RunSummary>());
  const liveKey = live.join(",");
  const { refresh, poll } = useMemo(() => {
    const abort = new AbortController();
    const refresh = new KeyedThrottle((id) => {
      api.runSummary(id, abort.signal).then((s) => setFresh((m) => new Map(m).set(id, s)), () => undefined);
    }, SUMMARY_MS);
    const poll = new FallbackPoll(() => { for (const id of live) refresh.call(id); }, SUMMARY_POLL_MS);
    return { refresh: { call: (id: string) => refresh.call(id), stop: () => { refresh.cancel(); abort.abort(); } }, poll };
  }, [liveKey]); // eslint-disable-line react-hooks/exhaustive-deps
  useEffect(() => () => {
    refresh.stop();
    poll.stop();
  }, [refresh, poll]);
  return {
    fresh,
    onPoints: (id: string) => refresh.call(id),
    onStreamState: (_id: string, state: StreamState) => poll.onState(state),
  };
}

function RunPicker({ exclude, onPick }: { exclude: string[]; onPick: (id: string) => void }) {
  const [open, setOpen] = useState(false);
  const [q, setQ] = useState("");
  const box = useRef<HTMLDivElement>(null);
  const runs = useResource(open ? (s) => api.listRuns({ limit: 300 }, s) : null, [open]);
  useEffect(() => {
    if (!open) return;
    const close = (e: MouseEvent) => { if (!box.current?.contains(e.target as Node)) setOpen(false); };
    document.addEventListener("mousedown", close);
    return () => document.removeEventListener("mousedown", close);
  }, [open]);
  const options = (runs.data?.runs ?? []).filter((r) => !exclude.includes(r.id))
    .filter((r) => !q || `${r.name ?? ""} ${r.id} ${r.project ?? ""}`.toLowerCase().includes(q.toLowerCase())).slice(0, 40);
  return (
    <div className="picker" ref={box}>
      <button className="btn btn-sm" onClick={() => setOpen(!open)} aria-expanded={open}><Icon name="plus" size={13} />Add run</button>
      {open && (
        <div className="popover picker-pop">
          <input autoFocus value={q} onChange={(e) => setQ(e.target.value)} placeholder="Search runs" aria-label="Search runs" />
          <ul>
            {!runs.data && <li className="muted small">Loading…</li>}
            {runs.data && !options.length && <li className="muted small">No other runs</li>}
            {options.map((r) => (
              <li key={r.id}><button onClick={() => { onPick(r.id); setOpen(false); setQ(""); }}>
                <span>{runLabel(r)}</span><span className="muted small mono">{r.project ?? r.id.slice(-6)}</span>
              </button></li>
            ))}
          </ul>
        </div>
      )}
    </div>
  );
}

function SummaryTable({ ids, runs, summaries, colors }: { ids: string[]; runs: Map<string, Run> | undefined;
  summaries: Map<string, RunSummary>; colors: Map<string, string> }) {
  const names = useMemo(() => {
    const all = new Map<string, "minimize" | "maximize" | null>();
    for (const id of ids) for (const [n, m] of Object.entries(summaries.get(id)?.metrics ?? {})) if (!all.get(n)) all.set(n, m.direction);
    return [...all.entries()].filter(([, d]) => d).map(([n, d]) => [n, d] as [string, "minimize" | "maximize"]).sort();
  }, [ids, summaries]);
  if (!names.length || ids.length < 2) return null;
  return (
    <div className="table-wrap compare-table">
      <table className="table compact">
        <thead>
          <tr><th>Best value</th>{ids.map((id) => <th key={id} className="num"><i className="run-swatch" style={{ background: colors.get(id) }} />{runLabel(runs?.get(id), id)}</th>)}</tr>
        </thead>
        <tbody>
          {names.map(([name, direction]) => {
            const values = ids.map((id) => summaries.get(id)?.metrics[name]?.best ?? null);
            const finite = values.map((v) => v?.value).filter((v): v is number => v !== null && v !== undefined);
            const winner = finite.length > 1 ? (direction === "minimize" ? Math.min(...finite) : Math.max(...finite)) : null;
            return (
              <tr key={name}>
                <td className="mono">{name} <span className="muted small">{direction === "minimize" ? "↓" : "↑"}</span></td>
                {values.map((v, i) => (
                  <td key={ids[i]} className={`num mono${v && v.value === winner ? " winner" : ""}`}
                    title={v?.step !== null && v?.step !== undefined ? `step ${fmtInt(v.step)}` : undefined}>
                    {v ? fmtValue(v.value) : ""}
                  </td>
                ))}
              </tr>
            );
          })}
        </tbody>
      </table>
    </div>
  );
}
