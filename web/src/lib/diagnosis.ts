// A diagnosis finding's evidence as links into the UI: a metric's steps -> the run's chart
// zoomed to them; log lines -> the job's log, filtered to the first of them; a GPU sample ->
// the node's page; an event -> the events page; a checkpoint -> the run's checkpoints tab.

export type Evidence = Record<string, unknown> & { kind: string };

export interface EvidenceLink {
  to: string | null;
  label: string;
}

const q = encodeURIComponent;

function pair(value: unknown): [number, number] | null {
  return Array.isArray(value) && value.length === 2 && value.every((v) => typeof v === "number") ? [value[0], value[1]] : null;
}

export function evidenceLink(ev: Evidence, runId: string): EvidenceLink {
  const s = (key: string) => (typeof ev[key] === "string" ? (ev[key] as string) : undefined);
  switch (ev.kind) {
    case "metric": {
      const steps = pair(ev.steps);
      const run = s("run_id") ?? runId;
      const name = s("name") ?? "";
      // A range of one step is widened so the chart has something to show around it.
      const xr = steps ? (steps[0] < steps[1] ? steps : [steps[0] - 1, steps[1] + 1]) : null;
      const query = `tab=metrics&m=${q(name)}${xr ? `&xr=${xr[0]}..${xr[1]}` : ""}`;
      return { to: `/runs/${q(run)}?${query}`, label: `${name}${steps ? ` steps ${steps[0]}–${steps[1]}` : ""}` };
    }
    case "log": {
      const job = s("job_id");
      const lines = Array.isArray(ev.lines) ? (ev.lines as unknown[]).filter((l): l is string => typeof l === "string") : [];
      const stream = s("stream") ?? "stdout";
      const attempt = typeof ev.attempt === "number" ? ev.attempt : 0;
      const first = lines[0]?.trim().slice(0, 120);
      const to = job ? `/jobs/${q(job)}?stream=${q(stream)}&attempt=${attempt}${first ? `&q=${q(first)}` : ""}` : null;
      return { to, label: `${stream}${first ? `: ${first}` : ""}` };
    }
    case "gpu": {
      const node = s("node_id");
      return { to: node ? `/nodes?node=${q(node)}` : null, label: `GPU ${String(ev.gpu ?? "")} ${s("name") ?? ""}`.trim() };
    }
    case "event":
      return { to: `/runs/${q(runId)}?tab=events`, label: `event ${s("id") ?? ""}`.trim() };
    case "checkpoint":
      return { to: `/runs/${q(runId)}?tab=checkpoints`, label: `checkpoint ${s("id") ?? ""}`.trim() };
    default:
      return { to: null, label: ev.kind };
  }
}
