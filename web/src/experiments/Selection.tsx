// What the workspace looks at: one or more projects and experiments, or a sweep. Each is a
// chip (removable) with a searchable picker to add more; the lists load when a picker opens.

import { useState } from "react";
import { api } from "../api/client";
import { useResource } from "../api/hooks";
import type { Experiment } from "../api/types";
import { Icon } from "../components/Icon";
import { usePopover } from "../components/usePopover";

interface Option {
  id: string;
  label: string;
  sub?: string;
}

export interface SelectionValue {
  p: string[];
  e: string[];
  sweep: string;
}

export function Selection({ value, onChange, experimentNames }: {
  value: SelectionValue; onChange: (next: SelectionValue) => void;
  /** Experiment id to "project / name", from the runs already loaded. */
  experimentNames: Map<string, string> }) {
  const [projectsOpen, setProjectsOpen] = useState(false);
  const [experimentsOpen, setExperimentsOpen] = useState(false);
  const projects = useResource(projectsOpen || experimentsOpen ? (s) => api.listProjects(s) : null, [projectsOpen || experimentsOpen]);
  const experiments = useResource(experimentsOpen && projects.data ? async (s) => {
    const lists = await Promise.all(projects.data!.slice(0, 50).map((p) => api.listExperiments(p.name, s).catch(() => [] as Experiment[])));
    return lists.flat();
  } : null, [experimentsOpen, projects.data]);
  const sweeps = useResource((s) => api.listSweeps(s), []);
  const expLabel = (id: string) => {
    const e = experiments.data?.find((x) => x.id === id);
    return e ? `${e.project} / ${e.name}` : experimentNames.get(id) ?? id;
  };
  // A sweep is its own selection: choosing one clears the projects and experiments, and back.
  const set = (patch: Partial<SelectionValue>) => onChange({ ...value, ...patch });
  return (
    <div className="exp-selection" role="group" aria-label="Selection">
      <ChipPicker noun="project" selected={value.p} label={(id) => id} open={projectsOpen} setOpen={setProjectsOpen}
        options={projects.data?.map((p) => ({ id: p.name, label: p.name, sub: `${p.runs} runs` }))}
        onAdd={(id) => set({ p: [...value.p, id], sweep: "" })} onRemove={(id) => set({ p: value.p.filter((x) => x !== id) })} />
      <ChipPicker noun="experiment" selected={value.e} label={expLabel} open={experimentsOpen} setOpen={setExperimentsOpen}
        options={experiments.data?.map((e) => ({ id: e.id, label: `${e.project} / ${e.name}`, sub: `${e.runs} runs` }))}
        onAdd={(id) => set({ e: [...value.e, id], sweep: "" })} onRemove={(id) => set({ e: value.e.filter((x) => x !== id) })} />
      <label className="exp-inline">
        <span>Sweep</span>
        <select value={value.sweep} aria-label="Sweep"
          onChange={(ev) => onChange(ev.target.value ? { p: [], e: [], sweep: ev.target.value } : { ...value, sweep: "" })}>
          <option value="">none</option>
          {value.sweep && !sweeps.data?.some((s) => s.id === value.sweep) && <option value={value.sweep}>{value.sweep}</option>}
          {sweeps.data?.map((s) => <option key={s.id} value={s.id}>{s.name} ({s.counts.total} trials)</option>)}
        </select>
      </label>
    </div>
  );
}

function ChipPicker({ noun, selected, label, options, open, setOpen, onAdd, onRemove }: {
  noun: string; selected: string[]; label: (id: string) => string; options: Option[] | undefined; open: boolean;
  setOpen: (open: boolean) => void; onAdd: (id: string) => void; onRemove: (id: string) => void }) {
  const [q, setQ] = useState("");
  const { box, toggle } = usePopover(open, setOpen);
  const shown = (options ?? []).filter((o) => !selected.includes(o.id))
    .filter((o) => !q || `${o.label} ${o.id}`.toLowerCase().includes(q.toLowerCase())).slice(0, 60);
  return (
    <div className="exp-chip-picker">
      {selected.map((id) => (
        <span key={id} className="chip on">
          {label(id)}
          <button type="button" className="icon-btn" onClick={() => onRemove(id)} aria-label={`Remove the ${noun} ${label(id)}`}>
            <Icon name="x" size={11} />
          </button>
        </span>
      ))}
      <div className="picker" ref={box}>
        <button type="button" className="btn btn-sm" ref={toggle} onClick={() => setOpen(!open)} aria-expanded={open}>
          <Icon name="plus" size={13} />Add {noun}
        </button>
        {open && (
          <div className="popover picker-pop">
            <input autoFocus value={q} onChange={(e) => setQ(e.target.value)} placeholder={`Search ${noun}s`} aria-label={`Search ${noun}s`} />
            <ul>
              {!options && <li className="muted small">Loading…</li>}
              {options && !shown.length && <li className="muted small">No other {noun}s</li>}
              {shown.map((o) => (
                <li key={o.id}><button type="button" onClick={() => { onAdd(o.id); setOpen(false); setQ(""); }}>
                  <span>{o.label}</span>{o.sub && <span className="muted small">{o.sub}</span>}
                </button></li>
              ))}
            </ul>
          </div>
        )}
      </div>
    </div>
  );
}
