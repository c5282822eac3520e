// A small history router: the location is an external store, routes are patterns like
// "/runs/:id", and view state lives in the query string (see urlState.ts).

import { useCallback, useMemo, useSyncExternalStore, type AnchorHTMLAttributes, type MouseEvent } from "react";
import { parseState, patchSearch, type Schema } from "./urlState";

const NAVIGATE = "gpuplane:navigate";

function subscribe(callback: () => void): () => void {
  window.addEventListener("popstate", callback);
  window.addEventListener(NAVIGATE, callback);
  return () => {
    window.removeEventListener("popstate", callback);
    window.removeEventListener(NAVIGATE, callback);
  };
}

const snapshot = () => window.location.pathname + window.location.search;

export interface Location {
  pathname: string;
  search: string;
}

export function useLocation(): Location {
  const href = useSyncExternalStore(subscribe, snapshot, snapshot);
  return useMemo(() => {
    const q = href.indexOf("?");
    return q < 0 ? { pathname: href, search: "" } : { pathname: href.slice(0, q), search: href.slice(q) };
  }, [href]);
}

export function navigate(to: string, options: { replace?: boolean } = {}): void {
  if (to === snapshot()) return;
  if (options.replace) window.history.replaceState(null, "", to);
  else window.history.pushState(null, "", to);
  window.dispatchEvent(new Event(NAVIGATE));
}

/** The params of `pattern` ("/runs/:id") in `pathname`, or null when it does not match. */
export function matchPath(pattern: string, pathname: string): Record<string, string> | null {
  const want = pattern.split("/").filter(Boolean);
  const have = pathname.split("/").filter(Boolean);
  if (want.length !== have.length) return null;
  const params: Record<string, string> = {};
  for (let i = 0; i < want.length; i++) {
    if (want[i].startsWith(":")) {
      try {
        params[want[i].slice(1)] = decodeURIComponent(have[i]);
      } catch {
        return null;
      }
    } else if (want[i] !== have[i]) {
      return null;
    }
  }
  return params;
}

/** The page's typed view state, and a setter that writes a patch to the URL. */
export function useUrlState<S>(schema: Schema<S>): [S, (patch: Partial<S>, options?: { push?: boolean }) => void] {
  const { pathname, search } = useLocation();
  // The schema object is created per render by callers; its keys are what matter.
  const state = useMemo(() => parseState(search, schema), [search]); // eslint-disable-line react-hooks/exhaustive-deps
  const set = useCallback(
    (patch: Partial<S>, options: { push?: boolean } = {}) => {
      const next = patchSearch(window.location.search, schema, patch);
      navigate(window.location.pathname + next, { replace: !options.push });
    },
    [pathname], // eslint-disable-line react-hooks/exhaustive-deps
  );
  return [state, set];
}

type LinkProps = AnchorHTMLAttributes<HTMLAnchorElement> & { to: string; replace?: boolean };

export function Link({ to, replace, onClick, ...rest }: LinkProps) {
  const handle = (event: MouseEvent<HTMLAnchorElement>) => {
    onClick?.(event);
    if (event.defaultPrevented || event.button !== 0 || event.metaKey || event.ctrlKey || event.shiftKey ||
      event.altKey || rest.target === "_blank") return;
    event.preventDefault();
    navigate(to, { replace });
  };
  return <a href={to} onClick={handle} {...rest} />;
}
