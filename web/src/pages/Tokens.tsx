// Settings > Tokens: every API token with its scopes, its limits, its GPU-hour budget and what
// is left of it, when it was last used; and revoking one (after a confirmation). The route
// needs an admin session: anyone else sees the daemon's 403 in the banner.

import { useState } from "react";
import { api } from "../api/client";
import { useNow, useResource } from "../api/hooks";
import type { ApiToken } from "../api/types";
import { ConfirmDialog } from "../components/Dialog";
import { SettingsNav } from "../components/SettingsNav";
import { Ago, CopyId, Empty, ErrorBanner, Loading, Meter, PageHeader } from "../components/ui";
import { fmtDateTime } from "../lib/format";
import { budget, limitsText, tokenState } from "../lib/tokens";

export function Tokens() {
  const now = useNow(5000);
  const tokens = useResource((s) => api.listTokens({ limit: 500 }, s), [], { live: ["tokens"], pollMs: 10_000 });
  const [revoking, setRevoking] = useState<ApiToken | null>(null);
  const list = tokens.data?.tokens ?? [];
  return (
    <div className="page">
      <PageHeader title="Tokens" sub="Settings · API tokens: their scopes, limits and GPU-hour budgets" />
      <SettingsNav />
      <ErrorBanner error={tokens.error} onRetry={tokens.reload} />
      {!tokens.data && !tokens.error ? <Loading rows={5} /> : tokens.data && list.length === 0 ? (
        <Empty title="No tokens" icon="key">Make one from a shell: <code>gpuplanectl token create NAME --scope read,write</code></Empty>
      ) : list.length > 0 && (
        <div className="table-wrap">
          <table className="table fit tokens-table">
            <thead><tr>
              <th className="w-l">Name</th><th className="w-l">Scopes</th><th>Limits</th><th className="w-budget">GPU-hour budget</th>
              <th className="w-m">Last used</th><th className="w-m col-wide">Created</th><th className="w-s">State</th><th className="w-m" />
            </tr></thead>
            <tbody>
              {list.map((t) => {
                const state = tokenState(t, now);
                const b = budget(t);
                const limits = limitsText(t.limits);
                return (
                  <tr key={t.id} data-token={t.name} className={state === "active" ? undefined : "deleted-row"}>
                    <td><div className="clip strong" title={t.name}>{t.name}</div><div className="sub"><CopyId id={t.id} /></div></td>
                    <td className="mono" title={t.scopes.join(", ")}>{t.scopes.join(", ")}</td>
                    <td className="small" title={limits || undefined}>{limits || <span className="muted">none</span>}</td>
                    <td data-budget title={b?.text}>{b ? <><Meter value={b.left} max={b.total} tone={b.share < 0.1 ? "bad" : b.share < 0.25 ? "warn" : "ok"} label={b.text} />
                      <div className="sub">{b.text}</div></> : <span className="muted">none</span>}</td>
                    <td><Ago ts={t.last_used_at} now={now} /></td>
                    <td className="col-wide" title={fmtDateTime(t.created_at)}><Ago ts={t.created_at} now={now} /></td>
                    <td data-state title={state === "revoked" ? `revoked ${fmtDateTime(t.revoked_at)}` : state === "expired" ? `expired ${fmtDateTime(t.expires_at)}`
                      : t.expires_at ? `expires ${fmtDateTime(t.expires_at)}` : "never expires"}>{state}</td>
                    <td className="actions-col">{state !== "revoked" && (
                      <button className="btn btn-sm" onClick={() => setRevoking(t)} aria-label={`Revoke ${t.name}`}>Revoke</button>)}</td>
                  </tr>
                );
              })}
            </tbody>
          </table>
        </div>
      )}
      {revoking && (
        <ConfirmDialog title={`Revoke ${revoking.name}?`} confirm="Revoke token" danger onClose={() => setRevoking(null)}
          onConfirm={() => api.revokeToken(revoking.id).then(tokens.reload)}>
          <p>Every client using it (scripts, agents, MCP, browser sessions signed in with it) is refused from now on. It cannot be
            undone: make a new token instead.</p>
        </ConfirmDialog>
      )}
    </div>
  );
}
