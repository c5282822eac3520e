// The table's filters as chips, and an editor that fits the column: a numeric range for
// numbers (metric summaries included), a range of dates and times for a time (kept as epoch
// ms), a set of states for the status, a set of values for a column with few of them, and
// "contains" for the rest.

import { useEffect, useRef, useState } from "react";
import { RUN_STATES } from "../api/types";
import { Icon } from "../components/Icon";
import { fmtDateTime, fmtValue } from "../lib/format";
import { formatValue, valueKey, type Column } from "./columns";
import type { Filter, Filters, TableRow } from "./table";

const MAX_SET = 12;

export function describeFilter(label: string, f: Filter, time = false): string {
  if (f.kind === "range") {
    const show = time ? fmtDateTime : fmtValue;
    if (f.min !== null && f.max !== null) return `${label} ∈ [${show(f.min)}, ${show(f.max)}]`;
    return f.min !== null ? `${label} ≥ ${show(f.min)}` : `${label} ≤ ${show(f.max)}`;
  }
  if (f.kind === "set") return `${label} ∈ {${f.values.map((v) => v || "not set").join(", ")}}`;
  return `${label} contains “${f.text}”`;
}

/** The editor a column gets: range, set (with its values) or text. */
export function editorFor(column: Column, rows: readonly TableRow[]): { kind: "range"; time?: true } |
  { kind: "set"; values: string[] } | { kind: "text" } {
  if (column.id === "status") return { kind: "set", values: [...RUN_STATES] };
  if (column.kind === "time") return { kind: "range", time: true };
  if (column.kind === "number") return { kind: "range" };
  const values = new Set(rows.map((r) => valueKey(r.values[column.id])));
  if ((column.kind === "bool" || column.kind === "string" || column.kind === "mixed") && values.size <= MAX_SET) {
    return { kind: "set", values: [...values].sort() };
  }
  return { kind: "text" };
}

export function FilterBar({ columns, rows, filters, onChange }: {
  columns: Column[]; rows: TableRow[]; filters: Filters; onChange: (col: string, filter: Filter | null) => void }) {
  const [open, setOpen] = useState<string | null>(null);
  const label = (id: string) => columns.find((c) => c.id === id)?.label ?? id;
  const isTime = (id: string) => columns.find((c) => c.id === id)?.kind === "time";
  return (
    <div className="exp-filters" role="group" aria-label="Filters">
      {Object.entries(filters).map(([col, f]) => (
        <span key={col} className="chip on exp-filter-chip">
          <button type="button" className="link-btn" onClick={() => setOpen(col)} title="Change this filter">{describeFilter(label(col), f, isTime(col))}</button>
          <button type="button" className="icon-btn" onClick={() => onChange(col, null)} aria-label={`Remove the filter on ${label(col)}`}>
            <Icon name="x" size={11} />
          </button>
        </span>
      ))}
      <FilterEditor key={open ?? ""} columns={columns} rows={rows} filters={filters} start={open}
        onClose={() => setOpen(null)} onApply={(col, f) => { onChange(col, f); setOpen(null); }} />
    </div>
  );
}

function FilterEditor({ columns, rows, filters, start, onApply, onClose }: {
  columns: Column[]; rows: TableRow[]; filters: Filters; start: string | null;
  onApply: (col: string, f: Filter) => void; onClose: () => void }) {
  const [shown, setShown] = useState(start !== null);
  const [col, setCol] = useState(start ?? columns.find((c) => c.id !== "name")?.id ?? "");
  const column = columns.find((c) => c.id === col);
  const editor = column ? editorFor(column, rows) : { kind: "text" as const };
  const time = editor.kind === "range" && !!editor.time;
  const current = filters[col];
  const shownBound = (v: number | null) => (v === null ? "" : time ? toLocalInput(v) : String(v));
  const [min, setMin] = useState(current?.kind === "range" ? shownBound(current.min) : "");
  const [max, setMax] = useState(current?.kind === "range" ? shownBound(current.max) : "");
  const [text, setText] = useState(current?.kind === "text" ? current.text : "");
  const [picked, setPicked] = useState<string[]>(current?.kind === "set" ? current.values : []);
  const [error, setError] = useState<string | null>(null);
  const box = useRef<HTMLDivElement>(null);
  const toggle = useRef<HTMLButtonElement>(null);
  useEffect(() => {
    if (!shown) return;
    const close = (e: MouseEvent) => { if (!box.current?.contains(e.target as Node)) { setShown(false); onClose(); } };
    const onKey = (e: KeyboardEvent) => {
      if (e.key !== "Escape") return;
      setShown(false);
      onClose();
      toggle.current?.focus();
    };
    document.addEventListener("mousedown", close);
    document.addEventListener("keydown", onKey);
    return () => { document.removeEventListener("mousedown", close); document.removeEventListener("keydown", onKey); };
  }, [shown]); // eslint-disable-line react-hooks/exhaustive-deps

  const apply = () => {
    if (!column) return;
    if (editor.kind === "range") {
      const bound = (v: string) => (v.trim() === "" ? null : time ? new Date(v).getTime() : Number(v));
      const lo = bound(min);
      const hi = bound(max);
      if ((lo !== null && !Number.isFinite(lo)) || (hi !== null && !Number.isFinite(hi))) {
        setError(time ? "From and to must be dates and times (or empty for an open end)."
          : "Min and max must be numbers (or empty for an open end).");
        return;
      }
      if (lo === null && hi === null) { setError(time ? "Give a from, a to, or both." : "Give a min, a max, or both."); return; }
      if (lo !== null && hi !== null && lo > hi) { setError(time ? "From is after to." : "Min is above max."); return; }
      onApply(col, { kind: "range", min: lo, max: hi });
    } else if (editor.kind === "set") {
      if (!picked.length) { setError("Pick at least one value."); return; }
      onApply(col, { kind: "set", values: picked });
    } else {
      if (!text.trim()) { setError("Type the text to look for."); return; }
      onApply(col, { kind: "text", text: text.trim() });
    }
    setShown(false);
  };

  return (
    <div className="picker" ref={box}>
      <button type="button" className="btn btn-sm" ref={toggle} aria-expanded={shown} onClick={() => setShown(!shown)}>
        <Icon name="plus" size={13} />Filter
      </button>
      {shown && (
        <form className="popover exp-filter-pop" onSubmit={(e) => { e.preventDefault(); apply(); }}>
          <label className="field">
            <span>Column</span>
            <select value={col} onChange={(e) => { setCol(e.target.value); setError(null); setPicked([]); setMin(""); setMax(""); }}
              aria-label="Filter column">
              {columns.map((c) => <option key={c.id} value={c.id}>{c.group === "metric" ? `${c.label} (metric)` : c.label}</option>)}
            </select>
          </label>
          {time && (
            <div className="exp-range">
              <input type="datetime-local" value={min} onChange={(e) => setMin(e.target.value)} aria-label="From" />
              <span>to</span>
              <input type="datetime-local" value={max} onChange={(e) => setMax(e.target.value)} aria-label="To" />
            </div>
          )}
          {editor.kind === "range" && !time && (
            <div className="exp-range">
              <input inputMode="decimal" value={min} onChange={(e) => setMin(e.target.value)} placeholder="min" aria-label="Minimum" />
              <span>to</span>
              <input inputMode="decimal" value={max} onChange={(e) => setMax(e.target.value)} placeholder="max" aria-label="Maximum" />
            </div>
          )}
          {editor.kind === "set" && (
            <div className="exp-set" role="group" aria-label="Values">
              {editor.values.map((v) => (
                <label key={v} className="check">
                  <input type="checkbox" checked={picked.includes(v)}
                    onChange={(e) => setPicked(e.target.checked ? [...picked, v] : picked.filter((p) => p !== v))} />
                  {v === "" ? "not set" : col === "status" ? v.toLowerCase() : formatValue(v)}
                </label>
              ))}
            </div>
          )}
          {editor.kind === "text" && (
            <input value={text} onChange={(e) => setText(e.target.value)} placeholder="contains" aria-label="Contains" />
          )}
          {error && <div className="field-error" role="alert">{error}</div>}
          <div className="exp-pop-foot">
            <button type="button" className="btn btn-sm btn-ghost" onClick={() => { setShown(false); onClose(); }}>Cancel</button>
            <button type="submit" className="btn btn-sm btn-primary">Apply</button>
          </div>
        </form>
      )}
    </div>
  );
}

/** Epoch ms as a datetime-local input's value (local time, to the minute). */
function toLocalInput(ms: number): string {
  const d = new Date(ms);
  const pad = (n: number) => String(n).padStart(2, "0");
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())}T${pad(d.getHours())}:${pad(d.getMinutes())}`;
}
