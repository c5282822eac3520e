"""Job dependencies, pure: whether a job's dependencies are met, still pending, or can never be
met; why it waits for them, in words; and the cycle check a submit makes.

A dependency is on a job id, so on the job's final state: an attempt that fails with attempts
left sends its job back to the queue (QUEUED, not ended), and its dependants go on waiting.
LOST has not ended either (its node may still report how it ended).

The three conditions (``submit --after``, ``--after-any``, ``--after-failed``):
- ``succeeded``: runs once every dependency SUCCEEDED; can never run as soon as one ended
  otherwise (FAILED or CANCELLED).
- ``ended``: runs once every dependency ended, whatever the outcome; always can.
- ``failed``: waits until every dependency ended, then runs if one of them did not succeed
  (a clean-up or a notifier); can never run when they all succeeded.

A job that can never run is cancelled with failure reason DEPENDENCY_FAILED, and so are its
own dependants, transitively, in the same transaction (``gpuplaned.store.dependency_rows``):
it is never left queued forever, as Slurm leaves it.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping, Sequence

from gpuplaned.protocol.job_states import ENDED, AfterCondition, JobState


class Verdict(enum.Enum):
    MET = "met"  # it may run
    WAIT = "wait"  # a dependency has not ended yet
    NEVER = "never"  # its condition can no longer hold: cancel it (DEPENDENCY_FAILED)


def verdict(when: str, states: Iterable[str]) -> Verdict:
    """Whether a job whose dependencies are in ``states`` (their jobs' statuses) under ``when``
    (an ``AfterCondition``) may run, waits, or never can."""
    states = [JobState(s) for s in states]
    ended = [s for s in states if s in ENDED]
    condition = AfterCondition(when)
    if condition is AfterCondition.SUCCEEDED:
        if any(s is not JobState.SUCCEEDED for s in ended):
            return Verdict.NEVER
        return Verdict.MET if len(ended) == len(states) else Verdict.WAIT
    if len(ended) < len(states):
        return Verdict.WAIT
    if condition is AfterCondition.ENDED:
        return Verdict.MET
    return Verdict.MET if any(s is not JobState.SUCCEEDED for s in ended) else Verdict.NEVER


def waiting_reason(when: str, states: Mapping[str, str]) -> str:
    """Why a job waits for its dependencies (job id -> status), the ones not ended yet named with
    their state: ``after job_a (RUNNING), job_b (QUEUED)``; ``--after-any``/``--after-failed``
    say which they are."""
    pending = ", ".join(f"{job_id} ({state})" for job_id, state in states.items() if JobState(state) not in ENDED)
    prefix = {AfterCondition.SUCCEEDED: "after", AfterCondition.ENDED: "after the end of",
              AfterCondition.FAILED: "after a failure among"}[AfterCondition(when)]
    return f"{prefix} {pending}"


def never_reason(when: str, states: Mapping[str, str]) -> str:
    """Why a job can never run (its ``failure_message`` when it is cancelled)."""
    if AfterCondition(when) is AfterCondition.FAILED:
        return f"--after-failed: every dependency succeeded ({', '.join(states)})"
    failed = ", ".join(f"{job_id} {state}" for job_id, state in states.items()
                       if JobState(state) in ENDED and JobState(state) is not JobState.SUCCEEDED)
    return f"dependency {failed}"


def unknown(wanted: Sequence[str], known: Iterable[str]) -> list[str]:
    """The ids in ``wanted`` that name no job, in their order."""
    found = set(known)
    return [job_id for job_id in wanted if job_id not in found]


def cycle(edges: Mapping[str, Sequence[str]], job_id: str) -> list[str] | None:
    """A path of dependencies from ``job_id`` back to itself (``[job_id, ..., job_id]``) in
    ``edges`` (job id -> the ids it depends on); None: none. A job submitted alone cannot close
    one (it depends only on jobs that exist, none of which depends on it), but a submit that
    names the job itself or a batch of jobs that name each other can."""
    path: list[str] = []
    seen: set[str] = set()

    def walk(node: str) -> list[str] | None:
        for nxt in edges.get(node, ()):
            if nxt == job_id:
                return [*path, node, job_id]
            if nxt in seen:
                continue
            seen.add(nxt)
            path.append(node)
            found = walk(nxt)
            path.pop()
            if found:
                return found
        return None

    return walk(job_id)
