// Settings > Audit log: every REST write and MCP tool call, newest first: when, who (the
// token, or local for the control socket), what, with which arguments (secrets redacted), and
// how it went. Filter by token name (in the URL); older pages on demand.

import { useEffect, useState } from "react";
import { api } from "../api/client";
import { useNow, useResource } from "../api/hooks";
import type { AuditRow } from "../api/types";
import { Icon } from "../components/Icon";
import { SettingsNav } from "../components/SettingsNav";
import { Ago, Empty, ErrorBanner, Loading, PageHeader } from "../components/ui";
import { fmtDateTime } from "../lib/format";
import { useUrlState } from "../router/router";
import { str } from "../router/urlState";

const schema = { token: str() };
const PAGE = 200;

export function Audit() {
  const [view, setView] = useUrlState(schema);
  const [typed, setTyped] = useState(view.token);
  const now = useNow(5000);
  const first = useResource((s) => api.listAudit({ token: view.token || undefined, limit: PAGE }, s), [view.token],
    { live: ["audit"], pollMs: 10_000, keepPrevious: false });
  const [older, setOlder] = useState<AuditRow[]>([]);
  const [cursor, setCursor] = useState<string | null>(null);
  useEffect(() => {
    setOlder([]);
    setCursor(first.data?.next_cursor ?? null);
  }, [first.data]);
  const loadOlder = async () => {
    if (!cursor) return;
    const page = await api.listAudit({ token: view.token || undefined, limit: PAGE, cursor });
    setOlder((o) => [...o, ...page.entries]);
    setCursor(page.next_cursor);
  };
  const rows = [...(first.data?.entries ?? []), ...older];
  // A browser session's calls carry its token's id only: named from the token list.
  const tokens = useResource((s) => api.listTokens({ limit: 500 }, s), []);
  const names = new Map((tokens.data?.tokens ?? []).map((t) => [t.id, t.name]));
  return (
    <div className="page">
      <PageHeader title="Audit log" sub="Settings · every REST write and MCP tool call, newest first" />
      <SettingsNav />
      <form className="toolbar" onSubmit={(e) => { e.preventDefault(); setView({ token: typed.trim() }); }}>
        <div className="search">
          <Icon name="search" size={14} />
          <input value={typed} onChange={(e) => setTyped(e.target.value)} placeholder="Token name (local: the control socket)" title="A token's own calls, not its browser sessions'"
            aria-label="Only this token's calls" />
        </div>
        <button type="submit" className="btn btn-sm">Filter</button>
        {view.token && <button type="button" className="chip on" onClick={() => { setTyped(""); setView({ token: "" }); }}>
          token {view.token}<Icon name="x" size={11} /></button>}
      </form>
      <ErrorBanner error={first.error} onRetry={first.reload} />
      {!first.data && !first.error ? <Loading rows={8} /> : first.data && rows.length === 0 ? (
        <Empty title={view.token ? `No calls by ${view.token}` : "Nothing audited yet"} icon="key">Writes and tool calls are recorded as they are answered.</Empty>
      ) : rows.length > 0 && (
        <div className="table-wrap" tabIndex={0} role="region" aria-label="Audit log">
          {/* Its rows hold no link: the box itself takes the focus, so the keyboard can scroll it. */}
          <table className="table fit audit-table">
            <thead><tr><th className="w-m">Time</th><th className="w-xl">Caller</th><th>Action</th><th className="w-m">Outcome</th>
              <th>Arguments</th></tr></thead>
            <tbody>
              {rows.map((r) => {
                const args = JSON.stringify(r.arguments);
                return (
                  <tr key={r.id} data-audit={r.id}>
                    <td title={fmtDateTime(r.ts)}><Ago ts={r.ts} now={now} /></td>
                    <td title={[r.caller_kind, r.token_id, r.token_name].filter(Boolean).join(" ")}>{callerText(r, names)}<span className="muted small"> · {r.via}</span></td>
                    <td className="mono small" title={r.action}>{r.action}</td>
                    <td title={r.detail ?? undefined} className={r.outcome === "ok" ? undefined : "text-bad"}>{r.outcome}</td>
                    <td className="mono small" title={args}>{args === "{}" ? "" : args}</td>
                  </tr>
                );
              })}
            </tbody>
          </table>
          {cursor && <div className="table-more"><button className="btn btn-sm" onClick={loadOlder}>Load older</button></div>}
        </div>
      )}
    </div>
  );
}

/** Who made the call: the token's name; for a browser session "browser session", with the name of
 * the token it was made from when the row has its id (else the session's key is in the title). */
export function callerText(r: Pick<AuditRow, "caller_kind" | "token_id" | "token_name">, names: ReadonlyMap<string, string>): string {
  const named = r.token_id ? names.get(r.token_id) ?? null : null;
  if (r.caller_kind === "cookie") return named ? `browser session of ${named}` : "browser session";
  return r.token_name ?? named ?? r.caller_kind;
}
