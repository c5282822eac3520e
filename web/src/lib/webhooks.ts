// The Webhooks page's form: what was typed -> the POST /api/v1/webhooks body, or what is wrong
// with it (checked here as the daemon checks it, so a mistake is shown before a round trip).

import { SEVERITIES, WEBHOOK_FORMATS, type Severity, type WebhookCreate, type WebhookFormat } from "../api/types";

export interface WebhookForm {
  url: string;
  events: string;
  severity: string;
  format: string;
  secret: string;
}

export const EMPTY_WEBHOOK_FORM: WebhookForm = { url: "", events: "*", severity: "info", format: "json", secret: "" };

export function webhookBody(form: WebhookForm): { body?: WebhookCreate; error?: string } {
  const url = form.url.trim();
  if (!/^https?:\/\/[^\s/?#]+\S*$/.test(url)) return { error: "URL: an http:// or https:// address" };
  const events = [...new Set(form.events.split(",").map((t) => t.trim().toUpperCase()).filter(Boolean))];
  if (!events.length) return { error: "Events: one type at least, or * for all" };
  if (!(SEVERITIES as readonly string[]).includes(form.severity)) return { error: `Severity: one of ${SEVERITIES.join(", ")}` };
  if (!(WEBHOOK_FORMATS as readonly string[]).includes(form.format)) return { error: `Format: one of ${WEBHOOK_FORMATS.join(", ")}` };
  const secret = form.secret;
  if (secret && (secret.length < 8 || secret.length > 256)) return { error: "Secret: 8 to 256 characters, or none" };
  const body: WebhookCreate = { url, events: events.includes("*") ? ["*"] : events, severity: form.severity as Severity,
    format: form.format as WebhookFormat };
  if (secret) body.secret = secret;
  return { body };
}
