// A metric's ★ in a run's view: shows whether it is the run's primary metric and makes it so
// (or unsets it) through PUT /primary-metric, for the run's experiment, else its project,
// else globally (lib/primary.ts decides which, and what a click does).

import { useState } from "react";
import { api } from "../api/client";
import type { Run, RunPrimaryMetric } from "../api/types";
import { primaryScope, starAction } from "../lib/primary";

export function PrimaryStar({ name, run, primary, onChanged }: {
  name: string; run: Run; primary: RunPrimaryMetric | null | undefined; onChanged: () => void }) {
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<string | null>(null);
  const scope = primaryScope(run);
  const action = starAction(name, primary, scope);
  const click = async () => {
    setBusy(true);
    setError(null);
    try {
      await api.setPrimaryMetric({ metric: action.kind === "clear" ? null : name, ...scope.body });
      onChanged();
    } catch (e) {
      setError((e as Error).message);
    } finally {
      setBusy(false);
    }
  };
  return (
    <>
      <button type="button" className={action.on ? "star-btn on" : "star-btn"} aria-pressed={action.on}
        aria-label={`${name}: primary metric`} title={action.title} disabled={busy || action.kind === "none"}
        onClick={click}>{action.on ? "★" : "☆"}</button>
      {error && <span className="text-bad small" role="alert">{error}</span>}
    </>
  );
}
