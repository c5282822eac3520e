// The queue's levers on the Jobs page: each job group with its jobs counted, a filter to it,
// and its pause and resume; and a queued job's priority, changed in a small dialog.

import { useState } from "react";
import { api } from "../api/client";
import type { Group, Job } from "../api/types";
import { Dialog } from "./Dialog";
import { Icon } from "./Icon";

export function GroupsBar({ groups, selected, onSelect, onChanged }: {
  groups: Group[]; selected: string; onSelect: (group: string) => void; onChanged: () => void }) {
  const [busy, setBusy] = useState<string | null>(null);
  const [error, setError] = useState<string | null>(null);
  if (!groups.length) return null;
  const flip = async (g: Group) => {
    setBusy(g.name);
    setError(null);
    try {
      await api.pauseGroup(g.name, g.paused ? "resume" : "pause");
      onChanged();
    } catch (e) {
      setError((e as Error).message);
    } finally {
      setBusy(null);
    }
  };
  return (
    <div className="groups-bar" role="group" aria-label="Job groups">
      <span className="muted small">Groups</span>
      {groups.map((g) => (
        <span key={g.name} className={selected === g.name ? "group-chip on" : "group-chip"} data-group={g.name}>
          <button className="link-btn" aria-pressed={selected === g.name} title={selected === g.name ? "Show every group's jobs" : `Show only ${g.name}'s jobs`}
            onClick={() => onSelect(selected === g.name ? "" : g.name)}>
            <b>{g.name}</b>
          </button>
          <span className="muted small" data-counts>{g.queued} queued · {g.running} running{g.parallel !== null ? ` · at most ${g.parallel}` : ""}</span>
          {g.paused && <span className="badge badge-warn">paused</span>}
          <button className="icon-btn" disabled={busy !== null} onClick={() => flip(g)}
            aria-label={`${g.paused ? "Resume" : "Pause"} group ${g.name}`} title={g.paused ? "Resume: its queued jobs may start" : "Pause: none of its queued jobs starts; running ones go on"}>
            <Icon name={g.paused ? "play" : "pause"} size={13} />
          </button>
        </span>
      ))}
      {error && <span className="text-bad small" role="alert">{error}</span>}
    </div>
  );
}

/** A queued job's priority as a button that opens the dialog to change it; otherwise the number. */
export function PriorityCell({ job, onChange }: { job: Job; onChange: (job: Job) => void }) {
  const [open, setOpen] = useState(false);
  if (job.status !== "QUEUED") return <>{job.priority}</>;
  // The dialog is in a portal, but its clicks still bubble (in React's tree) to the row, which opens the job.
  return (
    <span onClick={(e) => e.stopPropagation()}>
      <button className="link-btn prio-btn" onClick={(e) => { e.stopPropagation(); setOpen(true); }}
        aria-label={`Change the priority of ${job.name} (${job.priority})`} title="Change its priority">{job.priority}</button>
      {open && <PriorityDialog job={job} onClose={() => setOpen(false)} onChange={onChange} />}
    </span>
  );
}

export function parsePriority(text: string): number | string {
  const t = text.trim();
  if (!/^-?\d+$/.test(t)) return "a whole number, like 10 or -5";
  return Number(t);
}

function PriorityDialog({ job, onClose, onChange }: { job: Job; onClose: () => void; onChange: (job: Job) => void }) {
  const [text, setText] = useState(String(job.priority));
  const [error, setError] = useState<string | null>(null);
  const [busy, setBusy] = useState(false);
  const parsed = parsePriority(text);
  const save = async () => {
    if (typeof parsed === "string") return;
    setBusy(true);
    setError(null);
    try {
      onChange(await api.setJobPriority(job.id, parsed));
      onClose();
    } catch (e) {
      setError((e as Error).message);
      setBusy(false);
    }
  };
  return (
    <Dialog title={`Priority of ${job.name}`} onClose={onClose} footer={<>
      <button className="btn" onClick={onClose} disabled={busy}>Keep it</button>
      <button className="btn btn-primary" onClick={save} disabled={busy || typeof parsed === "string"}>{busy ? "Working…" : "Set priority"}</button>
    </>}>
      <form onSubmit={(e) => { e.preventDefault(); void save(); }} className="field">
        <label htmlFor="prio">Priority (higher runs first)</label>
        <input id="prio" autoFocus value={text} onChange={(e) => setText(e.target.value)} inputMode="numeric"
          aria-invalid={typeof parsed === "string"} />
        {typeof parsed === "string" && <span className="field-error">Priority must be {parsed}</span>}
      </form>
      {error && <div className="banner banner-bad" role="alert"><Icon name="alert" />{error}</div>}
    </Dialog>
  );
}
