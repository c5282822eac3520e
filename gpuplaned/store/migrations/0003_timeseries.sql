-- Time series (issue: time-series storage engine; docs/timeseries.md).
-- The seed's row-per-point tables were never used; points now live packed in chunks.
DROP TABLE metrics_raw;
DROP TABLE metrics_rollup;
DROP TABLE node_metrics_raw;
DROP TABLE node_metrics_rollup;

-- One row per (kind, owner, name): 'run' series belong to a run id, 'node' ones to a node id.
CREATE TABLE ts_series (
  id    INTEGER PRIMARY KEY,
  kind  TEXT NOT NULL CHECK (kind IN ('node', 'run')),
  owner TEXT NOT NULL,
  name  TEXT NOT NULL,
  UNIQUE (kind, owner, name)
);

-- A chunk packs many points (res = 0) or rollup buckets (res = bucket width in ms) of one
-- series into `data`; the other columns summarize the whole chunk so queries and
-- retention can often skip the blob. `blocks` holds the same summary per 64 points.
-- packed = 0: plain arrays written by ingest, waiting for compact() to merge and compress.
CREATE TABLE ts_chunks (
  id        INTEGER PRIMARY KEY,
  series_id INTEGER NOT NULL REFERENCES ts_series(id) ON DELETE CASCADE,
  res       INTEGER NOT NULL,
  packed    INTEGER NOT NULL,
  start_ts  INTEGER NOT NULL,
  end_ts    INTEGER NOT NULL,
  step_min  INTEGER,
  step_max  INTEGER,
  last_step INTEGER,
  n         INTEGER NOT NULL,
  count     INTEGER NOT NULL,
  nan       INTEGER NOT NULL,
  vmin      REAL,
  vmax      REAL,
  vsum      REAL,
  vlast     REAL,
  last_ts   INTEGER NOT NULL,
  data      BLOB NOT NULL,
  blocks    BLOB
);
CREATE INDEX idx_ts_chunks ON ts_chunks(series_id, res, start_ts);
CREATE INDEX idx_ts_chunks_loose ON ts_chunks(series_id, res) WHERE packed = 0;

-- Rollup progress per node series and resolution: buckets starting before done_until are
-- built; late raw points set dirty_from so the next pass rebuilds from there;
-- source_floor is where retention cut the finer data this resolution is built from.
CREATE TABLE ts_rollup_state (
  series_id    INTEGER NOT NULL REFERENCES ts_series(id) ON DELETE CASCADE,
  res          INTEGER NOT NULL,
  done_until   INTEGER NOT NULL,
  dirty_from   INTEGER,
  source_floor INTEGER,
  PRIMARY KEY (series_id, res)
) WITHOUT ROWID;

-- Ingest batches already stored, so a resent (source, seq) is a no-op.
CREATE TABLE ts_batches (
  source      TEXT NOT NULL,
  seq         INTEGER NOT NULL,
  received_ms INTEGER NOT NULL,
  PRIMARY KEY (source, seq)
) WITHOUT ROWID;
