// The run page's Diagnosis tab: GET /api/v1/runs/{id}/diagnosis (plain rules, no model): a
// summary, the findings worst first, each with links to its evidence, and what to do next.
// A live run's diagnosis is asked again when the run's events stream brings one of its events
// (a stall, a failure, a checkpoint may change it), at most every REFRESH_MS; polled only
// while that stream is down (reconnecting or refused), else never.

import { api } from "../api/client";
import { useResource } from "../api/hooks";
import { streamDown, useReloadOnPush } from "../api/pushedByStream";
import type { StreamState } from "../api/sse";
import { Empty, ErrorBanner, Loading } from "../components/ui";
import { evidenceLink } from "../lib/diagnosis";
import { Link } from "../router/router";

export const REFRESH_MS = 5000;
export const POLL_MS = 15_000;

/** `events`: the run's events stream (RunDetail follows it): its state, and how many events it brought. */
export function DiagnosisTab({ runId, live, events }: { runId: string; live: boolean;
  events: { state: StreamState; pushes: number } }) {
  const diagnosis = useResource((s) => api.runDiagnosis(runId, s), [runId],
    { pollMs: live && streamDown(events.state) ? POLL_MS : undefined });
  useReloadOnPush(events.pushes, diagnosis.reload, REFRESH_MS);
  const d = diagnosis.data;
  return (
    <section className="card diagnosis">
      <ErrorBanner error={diagnosis.error} onRetry={diagnosis.reload} />
      {!d && !diagnosis.error && <Loading rows={3} />}
      {d && (
        <>
          <header className="card-head"><h2>Diagnosis</h2></header>
          <p className="diagnosis-summary">{d.summary}</p>
          {d.findings.length === 0 && <Empty title="Nothing found" icon="check" compact>No rule found anything wrong.</Empty>}
          <ul className="findings">
            {d.findings.map((f, i) => (
              <li key={i} className={`finding sev-${f.severity}`}>
                <div><span className={`badge sev-${f.severity}`}>{f.severity}</span> <strong>{f.kind}</strong>: {f.claim}</div>
                {f.evidence.length > 0 && (
                  <ul className="evidence">
                    {f.evidence.map((ev, j) => {
                      const link = evidenceLink(ev, runId);
                      return <li key={j}>{link.to ? <Link to={link.to}>{link.label}</Link> : link.label}</li>;
                    })}
                  </ul>
                )}
              </li>
            ))}
          </ul>
          {d.next_actions.length > 0 && (
            <>
              <h3>Next</h3>
              <ul className="next-actions">{d.next_actions.map((a, i) => <li key={i}>{a}</li>)}</ul>
            </>
          )}
        </>
      )}
    </section>
  );
}
