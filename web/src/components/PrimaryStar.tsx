// A metric's ★ in a run's view: shows whether it is the run's primary metric and makes it so
// (or unsets it) through PUT /primary-metric, for the run's experiment, else its project,
// else globally (lib/primary.ts decides which, and what a click does); and, in the run's
// details, a ★ for each level, to set it exactly where it should hold.

import { useState } from "react";
import { api } from "../api/client";
import type { PrimaryMetric, Run, RunPrimaryMetric } from "../api/types";
import { primaryScope, starAction, type PrimaryScope } from "../lib/primary";

/** PUT /primary-metric for a ★: sets ``metric`` (null: unsets it) at ``scope``, then ``onChanged``;
 * ``busy`` while it is under way, ``error`` the last failure's message. */
export function usePrimaryPut(onChanged: () => void) {
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<string | null>(null);
  const put = async (metric: string | null, scope: PrimaryScope) => {
    setBusy(true);
    setError(null);
    try {
      await api.setPrimaryMetric({ metric, ...scope.body });
      onChanged();
    } catch (e) {
      setError((e as Error).message);
    } finally {
      setBusy(false);
    }
  };
  return { busy, error, put };
}

export function PrimaryStar({ name, run, primary, onChanged }: {
  name: string; run: Run; primary: RunPrimaryMetric | null | undefined; onChanged: () => void }) {
  const { busy, error, put } = usePrimaryPut(onChanged);
  const scope = primaryScope(run);
  const action = starAction(name, primary, scope);
  const click = () => put(action.kind === "clear" ? null : name, scope);
  return (
    <>
      <button type="button" className={action.on ? "star-btn on" : "star-btn"} aria-pressed={action.on}
        aria-label={`${name}: primary metric`} title={action.title} disabled={busy || action.kind === "none"}
        onClick={click}>{action.on ? "★" : "☆"}</button>
      {error && <span className="text-bad small" role="alert">{error}</span>}
    </>
  );
}

/** A metric's ★ at each level the run has (experiment, project, global): each shows whether
 * that level's own setting is this metric, and sets or clears it there. */
export function PrimaryLevels({ name, levels, settings, onChanged }: {
  name: string; levels: PrimaryScope[]; settings: PrimaryMetric["settings"] | undefined; onChanged: () => void }) {
  const { busy, error, put } = usePrimaryPut(onChanged);
  const flip = (level: PrimaryScope, on: boolean) => put(on ? null : name, level);
  return (
    <span className="primary-levels" role="group" aria-label={`${name}: primary metric at each level`}>
      {levels.map((l) => {
        const on = settings?.[l.level] === name;
        return (
          <button key={l.level} type="button" className={on ? "chip on" : "chip"} aria-pressed={on} disabled={busy || !settings}
            title={on ? `${name} is the primary metric of ${l.label}; click to unset it` : `Make ${name} the primary metric of ${l.label}`}
            onClick={() => flip(l, on)}>{on ? "★" : "☆"} {l.level}</button>
        );
      })}
      {error && <span className="text-bad small" role="alert">{error}</span>}
    </span>
  );
}
