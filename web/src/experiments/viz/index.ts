// The Experiments workspace's charts and sweep analysis (issue 33 item 1). The page
// (pages/Experiments.tsx) owns the state, in the URL; these draw it and report brushes,
// hovers and zooms back.

export type { Axis, Brush, Brushes, Value, VizRow } from "./types";
export { categoryLabel, passesBrushes } from "./brush";
export { importance, MIN_TRIALS_PER_VALUE, type ImportanceRow } from "./importance";
export { bandOn, groupRuns, unionX, type Band, type BandGroup } from "./bands";
