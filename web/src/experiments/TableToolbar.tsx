// What the runs table shows: its columns (a searchable list, per group), the key its rows are
// grouped by, the diff-only switch and the baseline run.

import { useState } from "react";
import { Icon } from "../components/Icon";
import { usePopover } from "../components/usePopover";
import type { Column } from "./columns";

export function TableToolbar({ columns, hidden, onHidden, group, onGroup, diff, onDiff, baselineName, onClearBaseline }: {
  columns: Column[]; hidden: string[]; onHidden: (hidden: string[]) => void; group: string; onGroup: (col: string) => void;
  diff: boolean; onDiff: (on: boolean) => void; baselineName: string | null; onClearBaseline: () => void }) {
  const groupable = columns.filter((c) => c.group === "config" || c.id === "status" || c.id === "tags");
  return (
    <>
      <ColumnsMenu columns={columns} hidden={hidden} onHidden={onHidden} />
      <label className="exp-inline">
        <span>Group by</span>
        <select value={group} onChange={(e) => onGroup(e.target.value)} aria-label="Group by">
          <option value="">none</option>
          {groupable.map((c) => <option key={c.id} value={c.id}>{c.label}</option>)}
        </select>
      </label>
      <button type="button" className={diff ? "btn btn-sm on" : "btn btn-sm"} aria-pressed={diff} onClick={() => onDiff(!diff)}
        title="Show only the config keys whose values differ across the shown runs">Diff only</button>
      {baselineName && (
        <span className="chip on">
          baseline: {baselineName}
          <button type="button" className="icon-btn" onClick={onClearBaseline} aria-label="Clear the baseline"><Icon name="x" size={11} /></button>
        </span>
      )}
    </>
  );
}

const GROUP_LABEL = { run: "Run", config: "Config", metric: "Metrics" } as const;

function ColumnsMenu({ columns, hidden, onHidden }: { columns: Column[]; hidden: string[]; onHidden: (hidden: string[]) => void }) {
  const [open, setOpen] = useState(false);
  const [q, setQ] = useState("");
  const { box, toggle } = usePopover(open, setOpen);
  const hide = new Set(hidden);
  const matches = columns.filter((c) => c.id !== "name" && (!q || c.label.toLowerCase().includes(q.toLowerCase())));
  const setGroup = (cols: Column[], show: boolean) => {
    const next = new Set(hidden);
    for (const c of cols) if (show) next.delete(c.id); else next.add(c.id);
    onHidden([...next]);
  };
  const shown = columns.filter((c) => !hide.has(c.id)).length;
  return (
    <div className="picker" ref={box}>
      <button type="button" className="btn btn-sm" ref={toggle} aria-expanded={open} onClick={() => setOpen(!open)}>
        <Icon name="columns" size={13} />Columns <span className="muted">{shown}/{columns.length}</span>
      </button>
      {open && (
        <div className="popover exp-columns-pop">
          <input autoFocus value={q} onChange={(e) => setQ(e.target.value)} placeholder="Search columns" aria-label="Search columns" />
          {(["run", "config", "metric"] as const).map((g) => {
            const cols = matches.filter((c) => c.group === g);
            if (!cols.length) return null;
            return (
              <fieldset key={g} className="exp-col-group">
                <legend>
                  {GROUP_LABEL[g]}
                  <button type="button" className="link-btn" onClick={() => setGroup(cols, true)}>all</button>
                  <button type="button" className="link-btn" onClick={() => setGroup(cols, false)}>none</button>
                </legend>
                {cols.map((c) => (
                  <label key={c.id} className="check">
                    <input type="checkbox" checked={!hide.has(c.id)} onChange={(e) => setGroup([c], e.target.checked)} />
                    <span className="mono">{c.label}</span>
                  </label>
                ))}
              </fieldset>
            );
          })}
        </div>
      )}
    </div>
  );
}
