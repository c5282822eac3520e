"""Semantic functions over a run's data (seed 000 section 11.1, Semantics): plain Python, no
LLM, no I/O. Each answers ``{"summary", "findings": [{"kind", "severity", "claim", "evidence"}],
"next_actions"}``; every evidence item is a pointer the API resolves (``evidence.py``). The
service (``gpuplaned.service.api.diagnosis``) reads what they need and passes it as plain data.
"""

from gpuplaned.domain.diagnosis.compare import compare_checkpoints, compare_runs
from gpuplaned.domain.diagnosis.failure import explain_failure
from gpuplaned.domain.diagnosis.run import diagnose_run

__all__ = ["compare_checkpoints", "compare_runs", "diagnose_run", "explain_failure"]
