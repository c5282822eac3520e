// The Experiments page's view, all of it in the URL (the single source of truth): the
// selection, the table (hidden columns, summaries, sort, filters, group, diff, baseline), the
// panels (metrics, x axis, smoothing, zoom) and the sweep's brushes and scatter axes. Keys and
// values that may hold any character (config keys, metric names) are escaped so that lists
// and entries split unambiguously; malformed entries are dropped, never guessed at.

import { bool, num, oneOf, parseState, range, str, type Codec } from "../router/urlState";
import type { Filter, Filters } from "./table";
import { SUMMARIES, type SummaryChoice } from "./summary";
import type { Brushes } from "./viz";

const SPECIAL = /[%,:~=|]/g;

/** A piece of an entry, with the characters the entry syntax uses percent-escaped. */
export function esc(text: string): string {
  return text.replace(SPECIAL, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`);
}

export function unesc(text: string): string {
  try {
    return decodeURIComponent(text);
  } catch {
    return text;
  }
}

/** A comma-separated list of escaped items (column ids, project names). */
export function keyList(): Codec<string[]> {
  return {
    parse: (raw) => (raw ? raw.split(",").filter(Boolean).map(unesc) : []),
    format: (value) => (value.length ? value.map(esc).join(",") : null),
  };
}

/** metric:choice pairs: each metric column's summary where it is not the default. */
export function summaryMap(): Codec<Record<string, SummaryChoice>> {
  return {
    parse: (raw) => {
      const out: Record<string, SummaryChoice> = {};
      for (const entry of raw ? raw.split(",") : []) {
        const at = entry.lastIndexOf(":");
        const choice = entry.slice(at + 1) as SummaryChoice;
        if (at > 0 && SUMMARIES.includes(choice)) out[unesc(entry.slice(0, at))] = choice;
      }
      return out;
    },
    format: (value) => {
      const entries = Object.entries(value).map(([name, choice]) => `${esc(name)}:${choice}`);
      return entries.length ? entries.join(",") : null;
    },
  };
}

const NUMBER = /^-?(\d+\.?\d*|\.\d+)(e[-+]?\d+)?$/i;

function parseBound(text: string): number | null | undefined {
  if (text === "") return null;
  return NUMBER.test(text) ? Number(text) : undefined;
}

/** One filter as text: "col:lo..hi" (a numeric range, either end open), "col=a|b" (a set), "col~text" (contains). */
export function formatFilter(col: string, f: Filter): string {
  if (f.kind === "range") return `${esc(col)}:${f.min ?? ""}..${f.max ?? ""}`;
  if (f.kind === "set") return `${esc(col)}=${f.values.map(esc).join("|")}`;
  return `${esc(col)}~${esc(f.text)}`;
}

export function parseFilter(entry: string): [string, Filter] | null {
  const at = entry.search(/[:=~]/);
  if (at <= 0) return null;
  const col = unesc(entry.slice(0, at));
  const rest = entry.slice(at + 1);
  const op = entry[at];
  if (op === "=") return [col, { kind: "set", values: rest === "" ? [] : rest.split("|").map(unesc) }];
  if (op === "~") return [col, { kind: "text", text: unesc(rest) }];
  const dots = rest.indexOf("..");
  if (dots < 0) return null;
  const min = parseBound(rest.slice(0, dots));
  const max = parseBound(rest.slice(dots + 2));
  if (min === undefined || max === undefined || (min === null && max === null)) return null;
  return [col, { kind: "range", min, max }];
}

export function filtersCodec(): Codec<Filters> {
  return {
    parse: (raw) => {
      const out: Filters = {};
      for (const entry of raw ? raw.split(",") : []) {
        const parsed = parseFilter(entry);
        if (parsed) out[parsed[0]] = parsed[1];
      }
      return out;
    },
    format: (value) => {
      const entries = Object.entries(value).map(([col, f]) => formatFilter(col, f));
      return entries.length ? entries.join(",") : null;
    },
  };
}

/** The parallel coordinates' brushes: a closed range or a set of categories, in the filters' syntax. */
export function brushesCodec(): Codec<Brushes> {
  const filters = filtersCodec();
  return {
    parse: (raw) => {
      const out: Brushes = {};
      for (const [col, f] of Object.entries(filters.parse(raw))) {
        if (f.kind === "set") out[col] = f;
        else if (f.kind === "range" && f.min !== null && f.max !== null && f.min <= f.max) out[col] = { kind: "range", min: f.min, max: f.max };
      }
      return out;
    },
    format: (value) => filters.format(value),
  };
}

export const viewSchema = {
  // The selection.
  p: keyList(),
  e: keyList(),
  sweep: str(),
  // The table.
  hide: keyList(),
  s: summaryMap(),
  sort: str(),
  f: filtersCodec(),
  g: str(),
  diff: bool(false),
  base: str(),
  // The panels.
  m: str(),
  x: oneOf(["step", "ts"] as const, "step"),
  smooth: num(0.6, 0, 0.99),
  xr: range(),
  // The sweep's charts.
  b: brushesCodec(),
  sx: str(),
  sy: str(),
};

export type ExperimentsView = { [K in keyof typeof viewSchema]: ReturnType<(typeof viewSchema)[K]["parse"]> };

/** Whether the view selects anything to load. */
export function hasSelection(view: Pick<ExperimentsView, "p" | "e" | "sweep">): boolean {
  return view.p.length > 0 || view.e.length > 0 || view.sweep !== "";
}

/** The view as the address holds it now, not as the last render saw it: for a handler called
 * several times in one tick (a chart clearing each of its brushes), each call builds on the last. */
export function currentView(search = window.location.search): ExperimentsView {
  return parseState(search, viewSchema);
}
