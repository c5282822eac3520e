"""What a job's failure policy does about one trigger event: pure, table-tested.

The triggers (event types) and the policy each one answers to:

- ``OOM`` (an attempt failed out of memory): ``on_oom`` queues the job again, at most
  ``retry`` times, each ``env`` variable changed by its rule (``half``: ``n // 2``, at least 1).
- ``JOB_FAILED`` with failure reason ``LOST`` (nothing tells how the attempt ended):
  ``on_lost = "requeue"``.
- ``JOB_FAILED`` with ``SIGNAL(SIGTERM|SIGKILL|SIGINT|SIGHUP)``: the job was killed from
  outside (GPUPlane's own stops are CANCELLED or TIMEOUT, never these), as a preemption, a
  cluster's reclaim or a person's ``kill``; or with ``PREEMPTED``: a Slurm node's scheduler
  preempted it. ``on_preempted`` queues it again resuming from its ``last`` (or ``best``)
  checkpoint.
- ``LOSS_NAN``: ``on_nan = "stop"``, a cancel (SIGTERM, SIGKILL after the job's grace).
- ``RUN_STALLED``: ``on_stalled`` once the stall lasted ``after`` (the event's ``silent_ms``
  says how long it had lasted when raised), and only if the job is still silent then:
  restart, stop or notify.

A requeue of a job the daemon already queued again (its ``max_attempts``) only changes its
env. An action that no longer fits (the job ended, or runs another attempt) is recorded as
skipped, with why.
"""

from __future__ import annotations

import attrs

from gpuplaned.protocol.job_policies import JobPolicies, duration_s, env_refusal
from gpuplaned.protocol.job_states import ACTIVE, RETRYABLE, JobState

POLICY_ACTION = "POLICY_ACTION"  # a policy acted: requeue, stop, restart, restarted or notify, with why
POLICY_SKIPPED = "POLICY_SKIPPED"  # a policy that answers the trigger could not act, with why
TRIGGERS = frozenset({"OOM", "JOB_FAILED", "LOSS_NAN", "RUN_STALLED"})  # as 0013's SQL trigger lists them
PREEMPT_SIGNALS = frozenset({"SIGNAL(SIGTERM)", "SIGNAL(SIGKILL)", "SIGNAL(SIGINT)", "SIGNAL(SIGHUP)"})
# Killed from outside: by one of those signals, or preempted by the cluster's scheduler (a Slurm node).
PREEMPTIONS = PREEMPT_SIGNALS | {"PREEMPTED"}


@attrs.frozen
class Trigger:
    type: str
    ts: int
    run_id: str | None
    context: dict  # the event's


@attrs.frozen
class JobFacts:
    status: str
    run_id: str | None
    env: dict[str, str]
    still_stalled: bool = True  # no metric and no log line since the RUN_STALLED


@attrs.frozen
class Decision:
    """``action``: requeue, stop, restart, notify, wait (not due before ``due_at``) or skip."""

    action: str
    reason: str
    env: dict[str, str] = attrs.field(factory=dict)  # the job's new values
    resume_from: str | None = None  # last or best, for a requeue
    due_at: int | None = None


def policy_for(trigger: Trigger, policies: JobPolicies) -> str | None:
    """The policy that answers ``trigger`` (on_oom, ...), None when none of the job's does."""
    failure = trigger.context.get("failure_reason")
    if trigger.type == "OOM" and policies.on_oom is not None:
        return "on_oom"
    if trigger.type == "JOB_FAILED" and failure == "LOST" and policies.on_lost is not None:
        return "on_lost"
    if trigger.type == "JOB_FAILED" and failure in PREEMPTIONS and policies.on_preempted is not None:
        return "on_preempted"
    if trigger.type == "LOSS_NAN" and policies.on_nan is not None:
        return "on_nan"
    if trigger.type == "RUN_STALLED" and policies.on_stalled is not None:
        return "on_stalled"
    return None


def decide(trigger: Trigger, policies: JobPolicies, job: JobFacts, done_before: int, now: int) -> Decision:
    """What to do (``done_before``: the actions this policy already took for the job)."""
    policy = policy_for(trigger, policies)
    if policy is None:
        return Decision("skip", f"no policy of the job answers {trigger.type}")
    if policy in ("on_oom", "on_lost", "on_preempted"):
        return _requeue(policy, trigger, policies, job, done_before)
    if policy == "on_nan":
        return _stop_live(trigger, job, "stop", "the loss is NaN (on_nan = stop)")
    stalled = policies.on_stalled
    assert stalled is not None
    after_ms = int((duration_s(stalled.after) or 0) * 1000)
    lasted_ms = int(trigger.context.get("silent_ms") or 0)
    due = trigger.ts + max(0, after_ms - lasted_ms)
    if now < due:
        return Decision("wait", f"stalled; on_stalled acts once the stall lasted {stalled.after}", due_at=due)
    if not job.still_stalled:
        return Decision("skip", f"the run stalled, but wrote again before {stalled.after} had passed")
    why = f"the run stalled for {stalled.after} (on_stalled action = {stalled.action})"
    if stalled.action == "notify":
        return Decision("notify", why)
    return _stop_live(trigger, job, stalled.action, why)


def _stop_live(trigger: Trigger, job: JobFacts, action: str, why: str) -> Decision:
    if job.status not in ACTIVE or (trigger.run_id is not None and trigger.run_id != job.run_id):
        return Decision("skip", f"{why}, but the job is {job.status} on another run or ended")
    return Decision(action, why)


def _requeue(policy: str, trigger: Trigger, policies: JobPolicies, job: JobFacts, done_before: int) -> Decision:
    if job.status not in RETRYABLE and job.status != JobState.QUEUED:
        return Decision("skip", f"{policy}: the job is {job.status} again")
    if policy == "on_oom":
        oom = policies.on_oom
        assert oom is not None
        if done_before >= oom.retry:
            return Decision("skip", f"out of memory; on_oom's {oom.retry} retries are spent")
        refused = env_refusal(oom, job.env)
        if refused is not None:
            return Decision("skip", f"out of memory; on_oom cannot retry: {refused}")
        env = {name: str(max(1, int(job.env[name]) // 2)) for name in oom.env}
        changes = ", ".join(f"{name} {job.env[name]} -> {value}" for name, value in env.items())
        return Decision("requeue", f"out of memory: retry {done_before + 1} of {oom.retry}"
                        + (f" with {changes}" if changes else ""), env=env)
    if policy == "on_lost":
        return Decision("requeue", "the job was lost (on_lost = requeue)")
    preempted = policies.on_preempted
    assert preempted is not None
    signal = trigger.context.get("failure_reason")
    return Decision("requeue", f"killed from outside ({signal}): requeued resuming from its "
                    f"{preempted.resume_from} checkpoint", resume_from=preempted.resume_from)
