// The Experiments workspace's charts and sweep analysis (issue 33 item 1). The page
// (pages/Experiments.tsx) owns the state, in the URL; these draw it and report brushes,
// hovers and zooms back.

export type { Axis, Brush, Brushes, Value, VizRow } from "./types";
export { categoryLabel, passesBrushes } from "./brush";
export { ParallelCoords, type ParallelCoordsProps } from "./ParallelCoords";
export { Scatter, type ScatterProps } from "./Scatter";
export { importance, MIN_TRIALS_PER_VALUE, type ImportanceRow } from "./importance";
export { ImportanceTable, type ImportanceTableProps } from "./ImportanceTable";
export { ExperimentPanels, type ExperimentPanelsProps, type PanelRunSpec } from "./ExperimentPanels";
export { bandOn, groupRuns, unionX, type Band, type BandGroup } from "./bands";
