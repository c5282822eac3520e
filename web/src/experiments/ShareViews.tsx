// Sharing a view and keeping named ones. The URL stays the source of truth: a short link
// (/v/<id>) is only a server-kept copy of the query string, and loading a saved view writes
// its state into the address (the view's id is not kept in it, so edits on top of it are
// what a link shares).

import { useState } from "react";
import { useResource } from "../api/hooks";
import { ConfirmDialog } from "../components/Dialog";
import { Icon } from "../components/Icon";
import { usePopover } from "../components/usePopover";
import { fmtDateTime } from "../lib/format";
import { navigate } from "../router/router";
import { workspaceApi } from "./api";
import type { SavedView } from "./types";

/** Above this many characters of state a share copies a short link instead of the full address. */
export const SHORT_LINK_OVER = 1500;
export const PAGE = "experiments";

/** The query string the view is kept as: the search without its "?". */
export function stateOf(search: string): string {
  return search.startsWith("?") ? search.slice(1) : search;
}

/** Where a kept view opens: its page with its state, the full state in the address. */
export function viewPath(view: Pick<SavedView, "state" | "page">): string {
  const page = /^[a-z][a-z0-9-]*$/.test(view.page) ? view.page : PAGE;
  return view.state ? `/${page}?${view.state}` : `/${page}`;
}

async function copy(text: string): Promise<boolean> {
  try {
    await navigator.clipboard.writeText(text);
    return true;
  } catch {
    return false;
  }
}

export function ShareButton() {
  const [link, setLink] = useState<{ url: string; copied: boolean; short: boolean } | null>(null);
  const [error, setError] = useState<string | null>(null);
  const [busy, setBusy] = useState(false);
  const share = async () => {
    setBusy(true);
    setError(null);
    try {
      const state = stateOf(window.location.search);
      let url = window.location.href;
      const short = state.length > SHORT_LINK_OVER;
      if (short) {
        const view = await workspaceApi.createView({ state, page: PAGE });
        url = `${window.location.origin}/v/${view.id}`;
      }
      setLink({ url, copied: await copy(url), short });
    } catch (e) {
      setError((e as Error).message);
    } finally {
      setBusy(false);
    }
  };
  return (
    <div className="exp-share">
      <button type="button" className="btn btn-sm" onClick={share} disabled={busy}><Icon name="copy" size={13} />Share</button>
      {link && (
        <span className="exp-share-link small" role="status">
          {link.copied ? "Copied" : "Copy this"} {link.short ? "short link" : "link"}:
          <input readOnly value={link.url} aria-label="The link to this view" onFocus={(e) => e.currentTarget.select()} />
        </span>
      )}
      {error && <span className="text-bad small" role="alert">{error}</span>}
    </div>
  );
}

export function SavedViews() {
  const [open, setOpen] = useState(false);
  const [name, setName] = useState("");
  const [error, setError] = useState<string | null>(null);
  const [doomed, setDoomed] = useState<SavedView | null>(null);
  const { box, toggle } = usePopover(open, setOpen, !doomed);
  const views = useResource(open ? (s) => workspaceApi.savedViews(s) : null, [open]);
  const save = async () => {
    if (!name.trim()) {
      setError("Name the view to save it.");
      return;
    }
    setError(null);
    try {
      await workspaceApi.createView({ state: stateOf(window.location.search), name: name.trim(), page: PAGE });
      setName("");
      views.reload();
    } catch (e) {
      setError((e as Error).message);
    }
  };
  return (
    <div className="picker exp-views" ref={box}>
      <button type="button" className="btn btn-sm" ref={toggle} aria-expanded={open} onClick={() => setOpen(!open)}>Saved views</button>
      {open && (
        <div className="popover exp-views-pop">
          <form className="exp-save" onSubmit={(e) => { e.preventDefault(); void save(); }}>
            <input value={name} onChange={(e) => setName(e.target.value)} placeholder="Name this view" aria-label="View name" />
            <button type="submit" className="btn btn-sm btn-primary">Save</button>
          </form>
          {error && <div className="field-error" role="alert">{error}</div>}
          {views.error && <div className="field-error" role="alert">{views.error.message}</div>}
          <ul className="exp-view-list">
            {!views.data && !views.error && <li className="muted small">Loading…</li>}
            {views.data && !views.data.length && <li className="muted small">No saved views yet</li>}
            {views.data?.map((v) => (
              <li key={v.id}>
                <button type="button" className="link-btn" onClick={() => { setOpen(false); navigate(viewPath(v), { replace: false }); }}
                  title={`Open ${v.name}`}>{v.name}</button>
                <span className="muted small">{fmtDateTime(v.created_at)}</span>
                <button type="button" className="icon-btn" onClick={() => setDoomed(v)} aria-label={`Delete the view ${v.name}`}>
                  <Icon name="x" size={12} />
                </button>
              </li>
            ))}
          </ul>
        </div>
      )}
      {doomed && (
        <ConfirmDialog title="Delete this view?" confirm="Delete" danger onClose={() => setDoomed(null)}
          onConfirm={async () => { await workspaceApi.deleteView(doomed.id); views.reload(); }}>
          The saved view <b>{doomed.name}</b> goes for everyone; links to it stop working.
        </ConfirmDialog>
      )}
    </div>
  );
}
