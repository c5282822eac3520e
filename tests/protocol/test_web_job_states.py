"""The UI's sets of job states (web/src/lib/jobStates.ts) are the daemon's
(gpuplaned/protocol/job_states.py), set by set, and no other web module writes one out."""

from __future__ import annotations

import re
from pathlib import Path

from gpuplaned.protocol import job_states
from gpuplaned.protocol.job_states import JobState

WEB = Path(__file__).resolve().parents[2] / "web" / "src"
SETS = WEB / "lib" / "jobStates.ts"
DECLARED = re.compile(r'^export const (\w+) = states\(([^)]*)\);$', re.M)


def _web_sets() -> dict[str, set[str]]:
    return {name: set(re.findall(r'"(\w+)"', body)) for name, body in DECLARED.findall(SETS.read_text())}


def _daemon_sets() -> dict[str, set[str]]:
    return {name: {state.value for state in value} for name, value in vars(job_states).items()
            if isinstance(value, frozenset) and value and all(isinstance(s, JobState) for s in value)}


def test_the_web_sets_are_the_daemons():
    assert _web_sets() == _daemon_sets()


def test_no_other_web_module_spells_out_a_set_of_ended_or_active_states():
    # A second copy is what drifted before: a Set or array of two or more job states, outside jobStates.ts
    # and the generated API types (tests and the state's colour map aside).
    names = "|".join(state.value for state in JobState)
    listed = re.compile(rf'(?:new Set\(|\[)\s*"(?:{names})"\s*,\s*"(?:{names})"')
    copies = [f"{path.relative_to(WEB)}:{text[:match.start()].count(chr(10)) + 1}"
              for path in sorted(WEB.rglob("*.ts*"))
              if path != SETS and path.parent.name != "api" and ".test." not in path.name
              for text in [path.read_text()] for match in listed.finditer(text)]
    assert copies == []
