"""Time-series storage: run and node metrics packed in SQLite chunks (docs/timeseries.md).

Write functions (``ingest``, ``compact``, ``rollup_pass``, ``retention_pass``, ``drop_from_step``) run inside
the store actor's open write transaction; read functions take a read-only connection.
"""

from gpuplaned.tsdb.codec import CorruptChunk
from gpuplaned.tsdb.compact import compact
from gpuplaned.tsdb.ingest import IngestResult, ingest
from gpuplaned.tsdb.query import latest, list_names, query_series, read_points
from gpuplaned.tsdb.retention import retention_pass
from gpuplaned.tsdb.rewind import drop_from_step, remaining
from gpuplaned.tsdb.rollup import rollup_pass

__all__ = [
    "CorruptChunk",
    "IngestResult",
    "compact",
    "drop_from_step",
    "ingest",
    "latest",
    "list_names",
    "query_series",
    "read_points",
    "remaining",
    "retention_pass",
    "rollup_pass",
]
