// Settings > Webhooks: the subscriptions (what each sends, how delivery went), a form to add
// one, and per row a test send and removal. The routes need an admin session (a Slack or Bark
// URL is a credential): anyone else sees the daemon's 403 in the banner.

import { useState } from "react";
import { api, ApiError } from "../api/client";
import { useNow, useResource } from "../api/hooks";
import { SEVERITIES, WEBHOOK_FORMATS, type WebhookTestResult } from "../api/types";
import { ConfirmDialog } from "../components/Dialog";
import { SettingsNav } from "../components/SettingsNav";
import { Ago, Empty, ErrorBanner, Loading, PageHeader } from "../components/ui";
import { EMPTY_WEBHOOK_FORM, webhookBody, type WebhookForm } from "../lib/webhooks";

export function Webhooks() {
  const now = useNow(5000);
  const hooks = useResource((s) => api.listWebhooks(s), [], { live: ["webhooks"], pollMs: 5000 });
  const [form, setForm] = useState<WebhookForm>(EMPTY_WEBHOOK_FORM);
  const [error, setError] = useState<string | null>(null);
  const [busy, setBusy] = useState(false);
  const [tested, setTested] = useState<Record<string, WebhookTestResult | string>>({});
  const [removing, setRemoving] = useState<{ id: string; url: string } | null>(null);
  const set = (field: keyof WebhookForm) => (e: { target: { value: string } }) => setForm((f) => ({ ...f, [field]: e.target.value }));

  const add = async () => {
    const { body, error: wrong } = webhookBody(form);
    if (!body) return setError(wrong ?? null);
    setBusy(true);
    try {
      await api.createWebhook(body);
      setForm(EMPTY_WEBHOOK_FORM);
      setError(null);
      hooks.reload();
    } catch (e) {
      setError(e instanceof ApiError ? e.message : String(e));
    } finally {
      setBusy(false);
    }
  };
  const test = async (id: string) => {
    setTested((t) => ({ ...t, [id]: "sending…" }));
    try {
      const result = await api.testWebhook(id);
      setTested((t) => ({ ...t, [id]: result }));
    } catch (e) {
      setTested((t) => ({ ...t, [id]: e instanceof Error ? e.message : String(e) }));
    }
  };
  const remove = async (id: string) => {
    await api.deleteWebhook(id); // a failure stays in the confirmation, which says it
    hooks.reload();
  };
  const list = hooks.data ?? [];

  return (
    <div className="page">
      <PageHeader title="Webhooks" sub="Settings · notifications of events to ntfy, Bark, Slack or any URL" />
      <SettingsNav />
      <ErrorBanner error={hooks.error} onRetry={hooks.reload} />
      <section className="card">
        <header className="card-head"><h2>Add a webhook</h2></header>
        <form className="form-grid webhook-form" onSubmit={(e) => { e.preventDefault(); void add(); }}>
          <div className="field span-2"><label htmlFor="wh-url">URL</label>
            <input id="wh-url" className="mono" value={form.url} onChange={set("url")} spellCheck={false}
              placeholder="https://ntfy.sh/my-topic" /></div>
          <div className="field span-2"><label htmlFor="wh-events">Event types (comma-separated, * for all)</label>
            <input id="wh-events" className="mono" value={form.events} onChange={set("events")} spellCheck={false}
              placeholder="RUN_FINISHED,JOB_FAILED,OOM" /></div>
          <div className="field"><label htmlFor="wh-severity">Least severity</label>
            <select id="wh-severity" value={form.severity} onChange={set("severity")}>
              {SEVERITIES.map((s) => <option key={s} value={s}>{s}</option>)}
            </select></div>
          <div className="field"><label htmlFor="wh-format">Format</label>
            <select id="wh-format" value={form.format} onChange={set("format")}>
              {WEBHOOK_FORMATS.map((f) => <option key={f} value={f}>{f}</option>)}
            </select></div>
          <div className="field span-2"><label htmlFor="wh-secret">Secret (signs each body; never shown again)</label>
            <input id="wh-secret" type="password" autoComplete="new-password" value={form.secret} onChange={set("secret")} /></div>
          {error && <div className="field-error span-2" role="alert">{error}</div>}
          <div className="span-2"><button type="submit" className="btn btn-primary" disabled={busy}>{busy ? "Adding…" : "Add webhook"}</button></div>
        </form>
      </section>
      {!hooks.data && !hooks.error && <Loading rows={3} />}
      {hooks.data && list.length === 0 && <Empty title="No webhooks" icon="events">Add one above to be told when a run finishes or fails.</Empty>}
      {list.length > 0 && (
        <div className="table-wrap">
          <table className="table webhooks-table">
            <thead><tr><th>URL</th><th>Events</th><th>Severity</th><th>Format</th><th>Signed</th><th className="num">Pending</th>
              <th className="num">Sent</th><th className="num">Gave up</th><th>Last sent</th><th>Last error</th><th /></tr></thead>
            <tbody>
              {list.map((h) => {
                const result = tested[h.id];
                return (
                  <tr key={h.id}>
                    <td className="mono" title={h.id}>{h.url}</td>
                    <td className="mono">{h.events.join(", ")}</td>
                    <td>{h.severity}</td>
                    <td>{h.format}</td>
                    <td>{h.signed ? "yes" : "no"}</td>
                    <td className="num">{h.pending}</td>
                    <td className="num">{h.delivered}</td>
                    <td className="num">{h.gave_up}</td>
                    <td><Ago ts={h.last_delivered_at} now={now} /></td>
                    <td className="mono">{h.last_error ?? "—"}</td>
                    <td className="actions">
                      <button className="btn btn-sm" onClick={() => void test(h.id)}>Test</button>{" "}
                      <button className="btn btn-sm btn-danger" onClick={() => setRemoving({ id: h.id, url: h.url })} aria-label={`Remove ${h.url}`}>Remove</button>
                      {result && <div className="test-result" role="status">{typeof result === "string" ? result
                        : result.delivered ? `delivered (HTTP ${result.status})` : `not delivered: ${result.error}`}</div>}
                    </td>
                  </tr>
                );
              })}
            </tbody>
          </table>
        </div>
      )}
      {removing && (
        <ConfirmDialog title="Remove this webhook?" confirm="Remove webhook" danger onClose={() => setRemoving(null)}
          onConfirm={() => remove(removing.id)}>
          <p>Nothing more is sent to <code>{removing.url}</code>, and its notifications still waiting are dropped.</p>
        </ConfirmDialog>
      )}
    </div>
  );
}
