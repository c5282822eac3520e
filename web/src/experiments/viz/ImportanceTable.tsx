// The parameter-importance table: keys by score, a bar for the score, which way is better
// for a numeric key, and "insufficient" where fewer than 5 trials stand behind a value
// (the score is shown, greyed, but not to be trusted; see importance.ts).

import { MIN_TRIALS_PER_VALUE, type ImportanceRow } from "./importance";

export interface ImportanceTableProps {
  rows: ImportanceRow[];
  /** The metric summary the scores are about, for the caption. */
  target?: string;
  /** How keys are shown (the key itself otherwise). */
  labels?: Map<string, string>;
}

/** Scored keys first, highest first; then the keys with no score. */
export function sortImportance(rows: readonly ImportanceRow[]): ImportanceRow[] {
  return [...rows].sort((a, b) => (b.score ?? -1) - (a.score ?? -1) || a.key.localeCompare(b.key));
}

export function ImportanceTable({ rows, target, labels }: ImportanceTableProps) {
  const sorted = sortImportance(rows);
  return (
    <div className="table-wrap viz-importance">
      <table className="table compact">
        <caption className="muted small">
          How much of {target ? <b className="mono">{target}</b> : "the metric"}'s spread each key explains, 0 to 1: the correlation
          ratio η for categories (and numbers with few values), |Spearman ρ| for numbers.
        </caption>
        <thead>
          <tr><th scope="col">Key</th><th scope="col">Importance</th><th scope="col" className="num">Trials per value</th>
            <th scope="col">Better</th></tr>
        </thead>
        <tbody>
          {sorted.map((r) => (
            <tr key={r.key} data-key={r.key} className={r.insufficient ? "viz-insufficient" : undefined}>
              <td className="mono">{labels?.get(r.key) ?? r.key}</td>
              <td>
                <span className="viz-bar" aria-hidden="true"><i style={{ width: `${Math.round((r.score ?? 0) * 100)}%` }} /></span>
                <span className="mono">{r.score === null ? "—" : r.score.toFixed(2)}</span>
                <span className="muted small"> {r.method === "eta" ? "η" : "|ρ|"}</span>
                {r.insufficient && (
                  <span className="badge viz-badge-insufficient" title={`Fewer than ${MIN_TRIALS_PER_VALUE} trials per value`}>insufficient</span>
                )}
              </td>
              <td className="num mono">{r.trialsPerValue}</td>
              <td>{r.better === "higher" ? "↑ higher" : r.better === "lower" ? "↓ lower" : ""}</td>
            </tr>
          ))}
        </tbody>
      </table>
    </div>
  );
}
