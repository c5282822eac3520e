// Small building blocks shared by the pages: badges, empty and error states, tabs,
// segmented controls, key-value grids, copyable ids, progress bars, the live indicator.

import { useState, type ReactNode } from "react";
import type { ApiError } from "../api/client";
import type { StreamState } from "../api/sse";
import { fmtAgo, shortId } from "../lib/format";
import { Icon } from "./Icon";

const STATUS_TONE: Record<string, string> = {
  RUNNING: "run", DISPATCHING: "run", QUEUED: "wait", CREATED: "wait", SUCCEEDED: "ok", FAILED: "bad",
  CANCELLED: "off", LOST: "warn", ONLINE: "ok", OFFLINE: "off", UNHEALTHY: "bad", RETRIED: "off",
  PAUSED: "warn", DONE: "ok",
};

export function StatusBadge({ status }: { status: string }) {
  const tone = STATUS_TONE[status] ?? "off";
  return <span className={`badge badge-${tone}`}><i className="dot" />{status.toLowerCase()}</span>;
}

export function SeverityBadge({ severity }: { severity: string }) {
  const tone = severity === "critical" ? "bad" : severity === "warning" ? "warn" : "info";
  return <span className={`badge sev badge-${tone}`}>{severity}</span>;
}

export function Empty({ title, children, icon = "search", compact }: { title: string; children?: ReactNode; icon?: string;
  compact?: boolean }) {
  return (
    <div className={compact ? "empty compact" : "empty"}>
      <Icon name={icon} size={compact ? 16 : 22} />
      <div>
        <div className="empty-title">{title}</div>
        {children && <div className="empty-body">{children}</div>}
      </div>
    </div>
  );
}

export function ErrorBanner({ error, onRetry }: { error: ApiError | Error | undefined; onRetry?: () => void }) {
  if (!error) return null;
  const code = "code" in error ? (error as ApiError).code : undefined;
  return (
    <div className="banner banner-bad" role="alert">
      <Icon name="alert" />
      <span>{error.message}{code && code !== "network" ? <code className="muted"> {code}</code> : null}</span>
      {onRetry && <button className="btn btn-ghost btn-sm" onClick={onRetry}>Retry</button>}
    </div>
  );
}

export function Loading({ rows = 4 }: { rows?: number }) {
  return (
    <div className="skeleton" aria-busy="true" aria-label="Loading">
      {Array.from({ length: rows }, (_, i) => <div key={i} className="skeleton-row" style={{ width: `${90 - i * 9}%` }} />)}
    </div>
  );
}

export interface TabItem<T extends string> {
  id: T;
  label: string;
  count?: number;
}

export function Tabs<T extends string>({ items, value, onChange }: { items: TabItem<T>[]; value: T; onChange: (v: T) => void }) {
  return (
    <div className="tabs" role="tablist">
      {items.map((t) => (
        <button key={t.id} role="tab" aria-selected={t.id === value} className={t.id === value ? "tab active" : "tab"}
          onClick={() => onChange(t.id)}>
          {t.label}
          {t.count !== undefined && <span className="tab-count">{t.count}</span>}
        </button>
      ))}
    </div>
  );
}

export function Segmented<T extends string>({ options, value, onChange, label }: {
  options: { id: T; label: ReactNode; title?: string }[]; value: T; onChange: (v: T) => void; label?: string }) {
  return (
    <div className="segmented" role="group" aria-label={label}>
      {options.map((o) => (
        <button key={o.id} title={o.title} className={o.id === value ? "on" : ""} aria-pressed={o.id === value}
          onClick={() => onChange(o.id)}>{o.label}</button>
      ))}
    </div>
  );
}

export function KeyValues({ items }: { items: [string, ReactNode][] }) {
  return (
    <dl className="kv">
      {items.map(([k, v]) => (
        <div key={k} className="kv-row"><dt>{k}</dt><dd>{v}</dd></div>
      ))}
    </dl>
  );
}

export function CopyId({ id, full }: { id: string; full?: boolean }) {
  const [copied, setCopied] = useState(false);
  const copy = (e: React.MouseEvent) => {
    e.preventDefault();
    e.stopPropagation();
    const done = () => {
      setCopied(true);
      setTimeout(() => setCopied(false), 1200);
    };
    if (navigator.clipboard) void navigator.clipboard.writeText(id).then(done, () => undefined);
  };
  return (
    <span className="copy-id mono" title={id}>
      {full ? id : shortId(id)}
      <button className="icon-btn" onClick={copy} aria-label={`Copy ${id}`} title="Copy">
        <Icon name={copied ? "check" : "copy"} size={12} />
      </button>
    </span>
  );
}

export function Ago({ ts, now }: { ts: number | null | undefined; now: number }) {
  return <time title={ts ? new Date(ts).toLocaleString() : undefined}>{fmtAgo(ts, now)}</time>;
}

/** A bar of value/max; `label` names it for screen readers (axe's aria-meter-name) and in its tooltip. */
export function Meter({ value, max = 100, tone, label }: { value: number | null | undefined; max?: number; tone?: string;
  label: string }) {
  const pct = value === null || value === undefined || !max ? 0 : Math.max(0, Math.min(100, (value / max) * 100));
  const auto = pct > 90 ? "bad" : pct > 75 ? "warn" : "ok";
  return (
    <div className={`meter meter-${tone ?? auto}`} title={label} aria-label={label} role="meter" aria-valuenow={Math.round(pct)}
      aria-valuemin={0} aria-valuemax={100}>
      <div style={{ width: `${pct}%` }} />
    </div>
  );
}

const LIVE_TEXT: Record<StreamState, string> = {
  connecting: "connecting", open: "live", reconnecting: "reconnecting", paused: "paused", closed: "stopped",
  failed: "unavailable",
};

export function LiveDot({ state, title }: { state: StreamState; title?: string }) {
  return (
    <span className={`live live-${state}`} title={title}>
      <i />{LIVE_TEXT[state]}
    </span>
  );
}

export function PageHeader({ title, sub, children }: { title: ReactNode; sub?: ReactNode; children?: ReactNode }) {
  return (
    <header className="page-head">
      <div className="page-title">
        <h1>{title}</h1>
        {sub && <div className="page-sub">{sub}</div>}
      </div>
      {children && <div className="page-actions">{children}</div>}
    </header>
  );
}
