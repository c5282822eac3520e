// The runs table: virtualised (fixed row height and column widths, spacer rows above and
// below the rendered window, which moves in blocks: 1,000 runs scroll as smoothly as 20), with a summary chooser on each metric
// column, sorting by any column, group rows with mean/min/max per metric, deltas against a
// baseline run, and the keyboard: arrows move the focused row, Enter opens its run.

import { memo, useCallback, useEffect, useLayoutEffect, useMemo, useRef, useState, type KeyboardEvent } from "react";
import { Link } from "../router/router";
import { StatusBadge } from "../components/ui";
import { fmtDateTime, fmtInt, fmtValue } from "../lib/format";
import { formatValue, type CellValue, type Column } from "./columns";
import { SUMMARIES, chosenSummary, type SummaryChoice } from "./summary";
import { delta, fmtDelta, type RowGroup, type Stat, type TableRow } from "./table";
import type { WorkspaceMetricInfo } from "./types";
import { sameWindow, scrollToRow, virtualWindow } from "./virtual";

export const ROW_HEIGHT = 32;
const HOVER_QUIET_MS = 200;
/** The scroll box's height where the browser reports none yet (jsdom, before layout). */
const FALLBACK_VIEWPORT = 560;

type DisplayRow = { kind: "group"; group: RowGroup; open: boolean } | { kind: "run"; row: TableRow };

export interface RunsTableProps {
  rows: TableRow[];
  /** Set when grouped: the groups of `rows`, in order. */
  groups: RowGroup[] | null;
  groupLabel?: string;
  columns: Column[];
  metrics: WorkspaceMetricInfo[];
  choices: Record<string, SummaryChoice>;
  onChoice: (metric: string, choice: SummaryChoice) => void;
  sort: string;
  onSort: (sort: string) => void;
  baseline: string;
  onBaseline: (id: string) => void;
  colors: Map<string, string>;
  highlight?: string | null;
  onHover?: (id: string | null) => void;
}

/** The rows in display order: each group's header, then its runs unless it is closed. */
export function displayRows(rows: TableRow[], groups: RowGroup[] | null, closed: ReadonlySet<string>): DisplayRow[] {
  if (!groups) return rows.map((row) => ({ kind: "run", row }));
  const out: DisplayRow[] = [];
  for (const group of groups) {
    const open = !closed.has(group.key);
    out.push({ kind: "group", group, open });
    if (open) for (const row of group.rows) out.push({ kind: "run", row });
  }
  return out;
}

export function RunsTable(props: RunsTableProps) {
  const { rows, groups, columns, sort, onSort } = props;
  const [closed, setClosed] = useState<Set<string>>(() => new Set());
  const display = useMemo(() => displayRows(rows, groups, closed), [rows, groups, closed]);
  const box = useRef<HTMLDivElement>(null);
  const head = useRef<HTMLTableSectionElement>(null);
  const viewport = useRef(FALLBACK_VIEWPORT);
  const [win, setWin] = useState(() => virtualWindow(0, FALLBACK_VIEWPORT, ROW_HEIGHT, display.length));
  const frame = useRef<number | null>(null);
  const settle = useRef<ReturnType<typeof setTimeout> | null>(null);
  const [focus, setFocus] = useState(0);
  const moved = useRef(false);
  const metricByName = useMemo(() => new Map(props.metrics.map((m) => [m.name, m])), [props.metrics]);
  const baseRow = props.baseline ? rows.find((r) => r.run.id === props.baseline) : undefined;

  // A React render only when the window moves to another block: most scroll frames render nothing.
  const measure = () => {
    const el = box.current;
    if (!el) return;
    viewport.current = (el.clientHeight || FALLBACK_VIEWPORT) - (head.current?.offsetHeight ?? 0);
    const next = virtualWindow(el.scrollTop, viewport.current, ROW_HEIGHT, display.length);
    setWin((w) => (sameWindow(w, next) ? w : next));
  };
  // At most one measure per frame while scrolling, however many scroll events the browser sends.
  const onScroll = () => {
    lastScroll.current = performance.now();
    // While scrolling the rows take no pointer: rows sliding under a still pointer would each
    // change :hover and repaint the table on every frame. Set on the element, not by a render.
    const el = box.current;
    if (el) {
      el.classList.add("exp-scrolling");
      if (settle.current !== null) clearTimeout(settle.current);
      settle.current = setTimeout(() => { settle.current = null; el.classList.remove("exp-scrolling"); }, HOVER_QUIET_MS);
    }
    if (frame.current !== null) return;
    frame.current = requestAnimationFrame(() => {
      frame.current = null;
      measure();
    });
  };
  useEffect(() => () => {
    if (frame.current !== null) cancelAnimationFrame(frame.current);
    if (settle.current !== null) clearTimeout(settle.current);
  }, []);
  useLayoutEffect(measure, [display.length]);
  useEffect(() => { if (focus >= display.length) setFocus(Math.max(0, display.length - 1)); }, [display.length, focus]);

  const colSpan = columns.length + 1;

  // After a keyboard move, the focus follows onto the newly rendered row.
  useEffect(() => {
    if (!moved.current) return;
    moved.current = false;
    box.current?.querySelector<HTMLElement>(`tr[data-index="${focus}"] [data-rowfocus]`)?.focus({ preventScroll: true });
  }, [focus, win.start]);

  const onKeyDown = (e: KeyboardEvent<HTMLTableSectionElement>) => {
    const page = Math.max(1, Math.floor(viewport.current / ROW_HEIGHT) - 1);
    const step: Record<string, number> = { ArrowDown: 1, ArrowUp: -1, PageDown: page, PageUp: -page };
    let next: number | null = null;
    if (e.key in step) next = focus + step[e.key];
    else if (e.key === "Home") next = 0;
    else if (e.key === "End") next = display.length - 1;
    if (next === null || !display.length) return;
    e.preventDefault();
    next = Math.max(0, Math.min(display.length - 1, next));
    const el = box.current;
    if (el) {
      el.scrollTop = scrollToRow(next, el.scrollTop, viewport.current, ROW_HEIGHT);
      measure();
    }
    moved.current = true;
    setFocus(next);
  };

  // Stable handlers, so a row re-renders only when what it shows changes (not on every scroll frame).
  const latest = useRef(props);
  latest.current = props;
  const onBaseline = useCallback((id: string) => latest.current.onBaseline(id), []);
  // Rows sliding under a still pointer while scrolling are not hovers: reporting them would
  // re-render the page (and repaint the table) on every row the wheel passes.
  const lastScroll = useRef(-Infinity);
  const onHover = useCallback((id: string | null) => {
    if (id !== null && performance.now() - lastScroll.current < HOVER_QUIET_MS) return;
    latest.current.onHover?.(id);
  }, []);
  const toggle = useCallback((key: string) => setClosed((c) => {
    const next = new Set(c);
    if (next.has(key)) next.delete(key);
    else next.add(key);
    return next;
  }), []);

  const sortBy = (id: string) => onSort(sort === id ? `-${id}` : sort === `-${id}` ? "" : id);

  return (
    <div className="table-wrap exp-table-scroll" ref={box} onScroll={onScroll}>
      <table className="table compact exp-table" aria-rowcount={display.length + 1} aria-label="Runs"
        style={{ width: SWATCH_WIDTH + columns.reduce((sum, c) => sum + columnWidth(c), 0) }}>
        <colgroup>
          <col style={{ width: SWATCH_WIDTH }} />
          {columns.map((c) => <col key={c.id} style={{ width: columnWidth(c) }} />)}
        </colgroup>
        <thead ref={head}>
          <tr aria-rowindex={1}>
            <th scope="col" className="exp-swatch-col"><span className="exp-sr-only">Colour</span></th>
            {columns.map((c) => (
              <th key={c.id} scope="col" className={c.group === "metric" || c.kind === "number" ? "num" : undefined}
                aria-sort={sort === c.id ? "ascending" : sort === `-${c.id}` ? "descending" : undefined}>
                <button type="button" className={sort.replace(/^-/, "") === c.id ? "sort on" : "sort"} onClick={() => sortBy(c.id)}
                  title={`Sort by ${c.label}`}>
                  {c.group === "metric" && metricByName.get(c.label)?.primary && <span className="exp-star" title="Primary metric">★</span>}
                  <span className="exp-col-label">{c.label}</span>
                  {c.group === "metric" && directionArrow(metricByName.get(c.label)?.direction)}
                  {sort === c.id ? " ▲" : sort === `-${c.id}` ? " ▼" : ""}
                </button>
                {c.group === "metric" && (
                  <select className="exp-summary" aria-label={`Summary of ${c.label}`}
                    value={chosenSummary(props.choices, c.label, metricByName.get(c.label)?.direction ?? null)}
                    onChange={(e) => props.onChoice(c.label, e.target.value as SummaryChoice)}>
                    {SUMMARIES.map((s) => <option key={s} value={s}>{s}</option>)}
                  </select>
                )}
              </th>
            ))}
          </tr>
        </thead>
        <tbody onKeyDown={onKeyDown}>
          {win.before > 0 && <tr aria-hidden="true" className="exp-spacer"><td colSpan={colSpan} style={{ height: win.before }} /></tr>}
          {display.slice(win.start, win.end).map((d, i) => {
            const index = win.start + i;
            const focusable = index === focus;
            if (d.kind === "group") {
              return <GroupRow key={`g:${d.group.key}`} group={d.group} open={d.open} index={index} focusable={focusable}
                columns={columns} label={props.groupLabel ?? "group"} onFocusRow={setFocus} onToggle={toggle} />;
            }
            const id = d.row.run.id;
            const isBase = id === props.baseline;
            return <RunRow key={id} row={d.row} index={index} focusable={focusable} columns={columns} color={props.colors.get(id)}
              base={isBase ? undefined : baseRow} isBaseline={isBase} highlighted={props.highlight === id}
              onFocusRow={setFocus} onBaseline={onBaseline} onHover={props.onHover ? onHover : undefined} />;
          })}
          {win.after > 0 && <tr aria-hidden="true" className="exp-spacer"><td colSpan={colSpan} style={{ height: win.after }} /></tr>}
        </tbody>
      </table>
    </div>
  );
}

const SWATCH_WIDTH = 28; // the quality bar counts a named column under 24 px as squeezed

/** A column's fixed width: the layout stays put whichever rows are rendered. */
export function columnWidth(c: Column): number {
  if (c.id === "status") return 116;
  if (c.id === "name") return 220;
  if (c.id === "tags") return 120;
  if (c.id === "created") return 136;
  if (c.group === "metric") return 150;
  return c.kind === "number" || c.kind === "bool" || c.kind === "empty" ? 104 : 140;
}

const GroupRow = memo(function GroupRow({ group, open, index, focusable, columns, label, onFocusRow, onToggle }: {
  group: RowGroup; open: boolean; index: number; focusable: boolean; columns: Column[]; label: string;
  onFocusRow: (index: number) => void; onToggle: (key: string) => void }) {
  return (
    <tr className="exp-group-row" data-index={index} aria-rowindex={index + 2}>
      <td />
      {columns.map((c, ci) => (
        <td key={c.id} className={c.group === "metric" ? "num mono" : undefined}>
          {ci === 0 ? (
            <button type="button" className="link-btn" data-rowfocus tabIndex={focusable ? 0 : -1} aria-expanded={open}
              onClick={() => { onFocusRow(index); onToggle(group.key); }} onFocus={() => onFocusRow(index)}>
              {open ? "▾" : "▸"} {label} = {formatValue(group.value)}
              <span className="muted"> ({group.rows.length})</span>
            </button>
          ) : c.group === "metric" ? <GroupStat stat={group.stats[c.id]} /> : null}
        </td>
      ))}
    </tr>
  );
});

const RunRow = memo(function RunRow({ row, index, focusable, columns, color, base, isBaseline, highlighted, onFocusRow, onBaseline,
  onHover }: {
  row: TableRow; index: number; focusable: boolean; columns: Column[]; color: string | undefined; base: TableRow | undefined;
  isBaseline: boolean; highlighted: boolean; onFocusRow: (index: number) => void; onBaseline: (id: string) => void;
  onHover?: (id: string | null) => void }) {
  const id = row.run.id;
  const onFocus = () => onFocusRow(index);
  return (
    <tr data-index={index} data-run={id} aria-rowindex={index + 2}
      className={[isBaseline ? "exp-baseline" : "", highlighted ? "selected" : ""].join(" ").trim() || undefined}
      onMouseEnter={onHover ? () => onHover(id) : undefined} onMouseLeave={onHover ? () => onHover(null) : undefined}>
      <td className="exp-swatch-col"><i className="run-swatch" style={{ background: color }} /></td>
      {columns.map((c) => (
        <Cell key={c.id} column={c} row={row} base={base} focusable={focusable} onFocus={onFocus} isBaseline={isBaseline}
          onBaseline={onBaseline} />
      ))}
    </tr>
  );
});

function directionArrow(direction: "min" | "max" | null | undefined) {
  if (!direction) return null;
  return <span className="muted small" title={direction === "min" ? "lower is better" : "higher is better"}>
    {direction === "min" ? " ↓" : " ↑"}</span>;
}

function GroupStat({ stat }: { stat: Stat | null | undefined }) {
  if (!stat) return <span className="muted">—</span>;
  return (
    <span title={`mean ${stat.mean} · min ${stat.min} · max ${stat.max} · ${stat.n} runs`}>
      {fmtValue(stat.mean)} <span className="muted small">[{fmtValue(stat.min)}, {fmtValue(stat.max)}]</span>
    </span>
  );
}

function Cell({ column, row, base, focusable, onFocus, isBaseline, onBaseline }: {
  column: Column; row: TableRow; base: TableRow | undefined; focusable: boolean; onFocus: () => void;
  isBaseline: boolean; onBaseline: (id: string) => void }) {
  const value: CellValue = row.values[column.id];
  const run = row.run;
  if (column.id === "status") return <td><StatusBadge status={run.status} /></td>;
  if (column.id === "name") {
    return (
      <td className="exp-name">
        <Link to={`/runs/${encodeURIComponent(run.id)}`} data-rowfocus tabIndex={focusable ? 0 : -1} onFocus={onFocus}
          title={run.id}>{run.name ?? run.id}</Link>
        <button type="button" className={isBaseline ? "chip on exp-base-btn" : "chip exp-base-btn"} tabIndex={focusable ? 0 : -1}
          aria-pressed={isBaseline} onFocus={onFocus} onClick={() => onBaseline(isBaseline ? "" : run.id)}
          title={isBaseline ? "The baseline: other rows show their difference from it; click to clear" : "Compare the other rows with this run"}
          aria-label={isBaseline ? `${run.name ?? run.id} is the baseline; clear it` : `Make ${run.name ?? run.id} the baseline`}>
          {isBaseline ? "base" : "vs"}
        </button>
      </td>
    );
  }
  if (column.id === "tags") return <td className="exp-tags" title={run.tags.join(", ")}>{run.tags.map((t) => <span key={t} className="tag">{t}</span>)}</td>;
  if (column.id === "created") return <td className="muted nowrap">{fmtDateTime(run.created_at)}</td>;
  const numeric = typeof value === "number";
  const d = base ? delta(value, base.values[column.id]) : null;
  const step = column.group === "metric" ? row.steps[column.id] : null;
  const title = value === null ? "null" : value === undefined ? "not set" : step !== null && step !== undefined
    ? `${formatValue(value)} at step ${fmtInt(step)}` : formatValue(value);
  return (
    <td className={numeric || column.group === "metric" ? "num mono" : "mono"} title={title}>
      {value === null || value === undefined ? <span className="muted">—</span> : formatValue(value)}
      {step !== null && step !== undefined && <span className="exp-step muted"> @{fmtInt(step)}</span>}
      {d !== null && <span className={d === 0 ? "exp-delta muted" : "exp-delta"}> {fmtDelta(d)}</span>}
    </td>
  );
}
