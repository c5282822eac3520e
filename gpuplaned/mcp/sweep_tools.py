"""The sweep tools (issue 31 item 7): submit_sweep, get_sweep, cancel_sweep, pause_sweep,
resume_sweep, retry_failed_sweep, set_sweep_max_parallel. Each calls the
service function its REST route calls (``gpuplaned.service.api.sweeps``) with the caller, so a
token's limits and budget are checked as for POST /api/v1/sweeps: the trials' worst case
together (trials x GPUs x timeout), refused beyond what is left, nothing queued.

A sweep's dry run (``dry_run`` in its body, as over REST) shows that worst case and what the
token's budget would have left after it, before anything is queued.
"""

from __future__ import annotations

from typing import Any

import attrs

from gpuplaned.domain.event_types import EVENT_TYPES
from gpuplaned.mcp import args as a
from gpuplaned.mcp.table import Call, Result, Tool, next_action
from gpuplaned.protocol.fields import doc
from gpuplaned.protocol.job_wire import to_spec
from gpuplaned.protocol.sweep_wire import PlannedTrial, Sweep, SweepDetail, SweepSubmit, SweepSubmitted, SweepTrial
from gpuplaned.service import access
from gpuplaned.service.api import budgets, sweeps

PLANNED_SHOWN = 20  # a dry run of 1,000 trials lists the first few: the count and the worst case say the rest
WAKE_ON = [t for t in ("RUN_FINISHED", "JOB_FAILED", "EARLY_STOPPED", "SWEEP_PAUSED") if t in EVENT_TYPES]


@attrs.frozen(kw_only=True)
class SweepSubmitOutcome:
    dry_run: bool = doc("true: nothing was queued")
    sweep: Sweep | None = doc("the sweep (a dry run: the existing one of that name, or null)")
    created: int = doc("trials queued (a dry run: that would be)", minimum=0)
    existing: int = doc("trials whose values the sweep has already: not queued again", minimum=0)
    worst_case_gpu_hours: float | None = doc("the new trials' worst case: trials x GPUs x timeout; null: no timeout")
    budget_after_gpu_hours: float | None = doc("what the token's GPU-hour budget has left once these trials are "
                                               "reserved; null: no budget")
    planned: list[PlannedTrial] = doc(f"a dry run: the first {PLANNED_SHOWN} trials it would queue")
    planned_left_out: int = doc("a dry run: trials it would queue beyond those listed", minimum=0)


@attrs.frozen(kw_only=True)
class SweepOutcome:
    sweep: Sweep
    trials: list[SweepTrial] = doc("the trials asked for, by number")
    trials_left_out: int = doc("trials that matched beyond the limit", minimum=0)


@attrs.frozen(kw_only=True)
class SweepCancelOutcome:
    dry_run: bool = doc("true: nothing was changed")
    sweep: Sweep = doc("the sweep now (a dry run: as it is)")
    would: str | None = doc("a dry run: what would happen, in words")


def summary_of(detail: SweepDetail) -> Sweep:
    return Sweep(**{f.name: getattr(detail, f.name) for f in attrs.fields(Sweep)})


def _worst_words(done: SweepSubmitted, gpu: int) -> str:
    worst = done.worst_case_gpu_hours
    if worst is None:
        return "no worst case (no timeout)"
    if done.created and gpu:
        return (f"worst case {worst:g} GPU-hours ({done.created} trials x {gpu} GPU(s) x "
                f"{worst / (done.created * gpu):.4g} h)")
    return f"worst case {worst:g} GPU-hours"


async def _budget_left(call: Call) -> float | None:
    return await access.readers(call.shared, "jobs").run(lambda conn: budgets.remaining(conn, call.caller))


async def submit_sweep(call: Call, body: SweepSubmit) -> Result:
    done = await sweeps.submit(call.shared, body, caller=call.caller)
    left = await _budget_left(call)  # after a real submit its trials are reserved already
    after = left - (done.worst_case_gpu_hours or 0.0) if left is not None and done.dry_run else left
    budget = f"; {after:.4g} GPU-hours of the budget left after it" if after is not None else ""
    worst = _worst_words(done, to_spec(body.job).gpu)  # gpus is gpu's alias
    planned = done.planned[:PLANNED_SHOWN]
    outcome = SweepSubmitOutcome(dry_run=done.dry_run, sweep=done.sweep, created=done.created, existing=done.existing,
                                 worst_case_gpu_hours=done.worst_case_gpu_hours, budget_after_gpu_hours=after,
                                 planned=planned, planned_left_out=len(done.planned) - len(planned))
    if done.dry_run:
        return Result(f"Dry run, nothing queued: {done.created} trial(s) would be queued ({done.existing} exist "
                      f"already); {worst}{budget}.", outcome)
    assert done.sweep is not None
    sweep = done.sweep
    return Result(f"Sweep {sweep.name} ({sweep.id}): {done.created} trial(s) queued, {done.existing} already there; "
                  f"{worst}{budget}.", outcome,
                  [next_action("get_sweep", "progress and the best trial so far", sweep_id=sweep.id),
                   next_action("wait_for_events", "be woken when trials end or the sweep pauses", types=WAKE_ON,
                               cursor=None, timeout_s=45)])


def _counts(sweep: Sweep) -> str:
    c = sweep.counts
    parts = [(c.queued, "queued"), (c.running, "running"), (c.succeeded, "succeeded"), (c.failed, "failed"),
             (c.cancelled, "cancelled")]
    return f"{c.total} trial(s): " + (", ".join(f"{n} {word}" for n, word in parts if n) or "none")


def _best(sweep: Sweep) -> str:
    b = sweep.best
    if b is None:
        return "; no best yet" if sweep.metric else ""
    values = ", ".join(f"{k}={v}" for k, v in b.values.items())
    return f"; best {sweep.metric} {b.value:.6g} (trial {b.trial}: {values})"


async def get_sweep(call: Call, args: a.GetSweepArgs) -> Result:
    detail = await sweeps.get_sweep(call.shared, args.sweep_id, caller=call.caller)
    sweep = summary_of(detail)
    wanted = [t for t in detail.trials if not args.status or t.status in args.status]
    shown = wanted[:args.limit]
    paused = f" ({sweep.pause_reason})" if sweep.paused and sweep.pause_reason else ""
    more: list[Any] = []
    if sweep.best is not None:
        more.append(next_action("get_job", "the best trial", job_id=sweep.best.job_id))
    failed = [t for t in detail.trials if t.status == "FAILED"]
    if failed:
        more.append(next_action("explain_failure", "why a trial failed", job_id=failed[0].job_id))
    if len(wanted) > len(shown):
        more.append(next_action("list_jobs", "its trials, page by page", sweep=sweep.id, limit=100))
    return Result(f"Sweep {sweep.name} ({sweep.id}) is {sweep.status}{paused}: {_counts(sweep)}{_best(sweep)}.",
                  SweepOutcome(sweep=sweep, trials=shown, trials_left_out=len(wanted) - len(shown)), more)


async def cancel_sweep(call: Call, args: a.SweepArgs) -> Result:
    if call.dry_run:
        sweep = summary_of(await sweeps.get_sweep(call.shared, args.sweep_id, caller=call.caller))
        words = (f"sweep {sweep.id} is cancelled already; nothing would change." if sweep.status == "CANCELLED" else
                 f"sweep {sweep.name} ({sweep.id}) would be cancelled: its {sweep.counts.queued} queued trial(s) at "
                 f"once, its {sweep.counts.running} running one(s) stopped (SIGTERM, then their grace).")
        return Result(f"Dry run, nothing changed: {words}", SweepCancelOutcome(dry_run=True, sweep=sweep, would=words))
    sweep = await sweeps.cancel(call.shared, args.sweep_id, caller=call.caller)
    return Result(f"Sweep {sweep.name} ({sweep.id}) is cancelled: {_counts(sweep)}.",
                  SweepCancelOutcome(dry_run=False, sweep=sweep, would=None),
                  [next_action("get_sweep", "its trials as they stop", sweep_id=sweep.id)])


async def pause_sweep(call: Call, args: a.SweepArgs) -> Result:
    sweep = await sweeps.pause(call.shared, args.sweep_id, caller=call.caller)
    return Result(f"Sweep {sweep.name} ({sweep.id}) is paused: no trial of it starts, its running ones go on; "
                  f"{_counts(sweep)}.", SweepOutcome(sweep=sweep, trials=[], trials_left_out=0),
                  [next_action("resume_sweep", "let its trials start again", sweep_id=sweep.id)])


async def resume_sweep(call: Call, args: a.SweepArgs) -> Result:
    sweep = await sweeps.resume(call.shared, args.sweep_id, caller=call.caller)
    return Result(f"Sweep {sweep.name} ({sweep.id}) is resumed: its queued trials may start; {_counts(sweep)}.",
                  SweepOutcome(sweep=sweep, trials=[], trials_left_out=0),
                  [next_action("get_sweep", "its trials as they start", sweep_id=sweep.id)])


async def set_sweep_max_parallel(call: Call, args: a.SweepLimitArgs) -> Result:
    sweep = await sweeps.set_max_parallel(call.shared, args.sweep_id, args.max_parallel, caller=call.caller)
    limit = f"at most {sweep.max_parallel} of its trials" if sweep.max_parallel is not None else "any number of trials"
    return Result(f"Sweep {sweep.name} ({sweep.id}) now runs {limit} at once (a Slurm node throttles its array job "
                  f"to it); {_counts(sweep)}.", SweepOutcome(sweep=sweep, trials=[], trials_left_out=0),
                  [next_action("get_sweep", "its trials under the new limit", sweep_id=sweep.id)])


async def retry_failed_sweep(call: Call, args: a.SweepArgs) -> Result:
    failed = summary_of(await sweeps.get_sweep(call.shared, args.sweep_id, caller=call.caller)).counts.failed
    sweep = await sweeps.retry_failed(call.shared, args.sweep_id, caller=call.caller)
    return Result(f"Sweep {sweep.name} ({sweep.id}): {failed} failed trial(s) queued again, a new attempt each; "
                  f"{_counts(sweep)}.", SweepOutcome(sweep=sweep, trials=[], trials_left_out=0),
                  [next_action("wait_for_events", "be woken when trials end", types=WAKE_ON, cursor=None,
                               timeout_s=45)])


def cancel_question(args: a.SweepArgs) -> str:
    return f"cancel sweep {args.sweep_id}: its queued trials, and its running ones stopped"


_CANCEL_DRY_RUN = {"dry_run": {"type": "boolean", "default": False,
                               "description": "say what would be cancelled and change nothing"}}

TOOLS = [
    Tool(name="submit_sweep", title="Submit sweep", description="Queue a hyperparameter sweep: one job per "
         "combination of grid, random (trials, seed) or trials_list values; {NAME} in job.command becomes the "
         "value. Refused, nothing queued, when trials x GPUs x timeout exceeds the token's budget. Run with "
         "dry_run first: it shows that worst case and the budget after. The same name and values never make a "
         "trial twice.", args=SweepSubmit, reply=SweepSubmitOutcome, handler=submit_sweep),
    Tool(name="get_sweep", title="Get sweep", description="A sweep's status, trial counts, best combination so far "
         "and its trials (their values, state, best metric value, why they wait or failed).", args=a.GetSweepArgs,
         reply=SweepOutcome, handler=get_sweep),
    Tool(name="cancel_sweep", title="Cancel sweep", description="Cancel a sweep: its queued trials, and its running "
         "ones stopped (asks the user to confirm unless the token allows unattended use).", args=a.SweepArgs,
         reply=SweepCancelOutcome, handler=cancel_sweep, extra=_CANCEL_DRY_RUN, question=cancel_question,
         by_hand="gpuplanectl sweep cancel ID"),
    Tool(name="pause_sweep", title="Pause sweep", description="Pause a sweep: none of its queued trials starts "
         "(they wait with 'sweep NAME paused'); its running trials go on.", args=a.SweepArgs, reply=SweepOutcome,
         handler=pause_sweep),
    Tool(name="resume_sweep", title="Resume sweep", description="Resume a paused sweep (paused by a user, or by "
         "its 3-early-failures rule): its queued trials may start again.", args=a.SweepArgs, reply=SweepOutcome,
         handler=resume_sweep),
    Tool(name="set_sweep_max_parallel", title="Set sweep max-parallel", description="Change how many of a sweep's "
         "trials run at once while it runs (null: no limit): its queued trials follow it from the next pass, and a "
         "Slurm node throttles the sweep's array job to it (scontrol ArrayTaskThrottle).", args=a.SweepLimitArgs,
         reply=SweepOutcome, handler=set_sweep_max_parallel),
    Tool(name="retry_failed_sweep", title="Retry failed trials", description="Queue a sweep's FAILED trials again, "
         "a new attempt each; a limited token is checked against its limits as for new submits.", args=a.SweepArgs,
         reply=SweepOutcome, handler=retry_failed_sweep),
]
