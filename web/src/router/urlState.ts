// View state in the URL: each page declares its query parameters with a codec, reads them
// as typed values and writes patches back. Defaults are left out of the URL so links stay
// short; parameters a page does not know are kept.

export interface Codec<T> {
  parse(raw: string | null): T;
  /** null: leave the parameter out (the default). */
  format(value: T): string | null;
}

export function str(fallback = ""): Codec<string> {
  return {
    parse: (raw) => (raw === null ? fallback : raw),
    format: (value) => (value === fallback ? null : value),
  };
}

export function int(fallback: number, min = -Infinity, max = Infinity): Codec<number> {
  return {
    parse: (raw) => {
      if (raw === null || !/^-?\d+$/.test(raw.trim())) return fallback;
      return Math.min(max, Math.max(min, Number(raw)));
    },
    format: (value) => (value === fallback ? null : String(Math.round(value))),
  };
}

export function num(fallback: number, min = -Infinity, max = Infinity): Codec<number> {
  return {
    parse: (raw) => {
      const value = raw === null || raw.trim() === "" ? NaN : Number(raw);
      return Number.isFinite(value) ? Math.min(max, Math.max(min, value)) : fallback;
    },
    format: (value) => (value === fallback ? null : String(value)),
  };
}

export function bool(fallback: boolean): Codec<boolean> {
  return {
    parse: (raw) => (raw === null ? fallback : raw === "1" || raw === "true"),
    format: (value) => (value === fallback ? null : value ? "1" : "0"),
  };
}

export function oneOf<T extends string>(values: readonly T[], fallback: T): Codec<T> {
  return {
    parse: (raw) => (raw !== null && (values as readonly string[]).includes(raw) ? (raw as T) : fallback),
    format: (value) => (value === fallback ? null : value),
  };
}

/** A comma-separated list; empty items are dropped. */
export function list(allowed?: readonly string[]): Codec<string[]> {
  return {
    parse: (raw) => {
      if (!raw) return [];
      const items = raw.split(",").map((s) => s.trim()).filter(Boolean);
      return allowed ? items.filter((s) => allowed.includes(s)) : items;
    },
    format: (value) => (value.length ? value.join(",") : null),
  };
}

/** A numeric range "a..b" (a zoomed x axis); null when absent or malformed. */
export function range(): Codec<[number, number] | null> {
  return {
    parse: (raw) => {
      const match = raw ? /^(-?\d+(?:\.\d+)?)\.\.(-?\d+(?:\.\d+)?)$/.exec(raw) : null;
      if (!match) return null;
      const lo = Number(match[1]);
      const hi = Number(match[2]);
      return lo < hi ? [lo, hi] : null;
    },
    format: (value) => (value ? `${value[0]}..${value[1]}` : null),
  };
}

export type Schema<S> = { [K in keyof S]: Codec<S[K]> };

export function parseState<S>(search: string, schema: Schema<S>): S {
  const params = new URLSearchParams(search);
  const out = {} as S;
  for (const key of Object.keys(schema) as (keyof S & string)[]) {
    out[key] = schema[key].parse(params.get(key));
  }
  return out;
}

/** The search string (with "?" or empty) after applying `patch` to `search`. */
export function patchSearch<S>(search: string, schema: Schema<S>, patch: Partial<S>): string {
  const params = new URLSearchParams(search);
  for (const key of Object.keys(patch) as (keyof S & string)[]) {
    const codec = schema[key];
    if (!codec) continue;
    const formatted = codec.format(patch[key] as S[typeof key]);
    if (formatted === null) params.delete(key);
    else params.set(key, formatted);
  }
  // URLSearchParams escapes "," and "/", which are safe in a query: keep links readable.
  const text = params.toString().replace(/%2C/gi, ",").replace(/%2F/gi, "/");
  return text ? `?${text}` : "";
}
