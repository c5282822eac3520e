"""The semantic tools: a run diagnosed, runs and checkpoints compared, the best checkpoint, a
failure explained (``gpuplaned.service.api.diagnosis``, ``best_checkpoint``). Their answers carry
their own summary; the next actions point along the study (compare, best, evaluate)."""

from __future__ import annotations

from gpuplaned.mcp import args as a
from gpuplaned.mcp.table import Call, Result, Tool, next_action
from gpuplaned.protocol.checkpoint_replies import BestCheckpoint
from gpuplaned.protocol.diagnosis_replies import CheckpointComparison, FailureExplanation, RunComparison, RunDiagnosis
from gpuplaned.protocol.errors import ApiError
from gpuplaned.service.api import diagnosis, runs
from gpuplaned.service.api.checkpoints import best as best_checkpoint


async def diagnose_run(call: Call, args: a.RunArgs) -> Result:
    found = await diagnosis.diagnose(call.shared, args.run_id)
    more = [next_action("list_checkpoints", "its checkpoints, the best marked", run_id=args.run_id)]
    detail = await runs.get_run_detail(call.shared, args.run_id)
    if detail.experiment is not None:
        exp_id = detail.experiment.id
        metric = await _rankable_by(call, exp_id)
        if metric is not None:
            more.append(next_action("get_best_checkpoint", "the best checkpoint over the experiment",
                                    experiment_id=exp_id, metric=metric))
    return Result(found.summary, found, more)


async def _rankable_by(call: Call, experiment_id: str) -> str | None:
    """The metric get_best_checkpoint would rank the experiment's checkpoints by, when it has an
    answer (a metric with a direction, a checkpoint with its value and file): only then is it a
    next step, and with the metric named, so it runs as suggested."""
    try:
        found = await best_checkpoint.best_for_experiment(call.shared, experiment_id, None, None)
    except ApiError:  # no primary metric, no direction, or no checkpoint to rank
        return None
    return found.metric


async def compare_runs(call: Call, args: a.CompareRunsArgs) -> Result:
    found = await diagnosis.compare(call.shared, ",".join(args.run_ids), args.align)
    return Result(found.summary, found,
                  [next_action("diagnose_run", "the baseline's findings", run_id=args.run_ids[0])])


async def compare_checkpoints(call: Call, args: a.CompareCheckpointsArgs) -> Result:
    found = await diagnosis.compare_checkpoint_ids(call.shared, ",".join(args.checkpoint_ids))
    return Result(found.summary, found, [next_action(
        "evaluate_checkpoint", "evaluate one of them", checkpoint_id=args.checkpoint_ids[0],
        command=["python", "eval.py", "{checkpoint}"], dry_run=True)])


async def get_best_checkpoint(call: Call, args: a.BestCheckpointArgs) -> Result:
    found = await best_checkpoint.best_for_experiment(call.shared, args.experiment_id, args.project, args.metric)
    ck_id = found.checkpoint.id
    words = (f"The best checkpoint of experiment {found.experiment_id} is {ck_id} (run {found.run_id}), "
             f"{found.metric} {found.metric_value:.4g} ({found.direction}).")
    if found.skipped:
        words += f" {len(found.skipped)} better one(s) passed over: file gone or changed."
    return Result(words, found, [next_action("evaluate_checkpoint", "evaluate it", checkpoint_id=ck_id,
                                             command=["python", "eval.py", "{checkpoint}"], dry_run=True)])


async def explain_failure(call: Call, args: a.JobArgs) -> Result:
    found = await diagnosis.explain(call.shared, args.job_id)
    more = [next_action("tail_logs", "the lines around the error", job_id=args.job_id, grep="(?i)error|traceback",
                        max_lines=40)]
    if found.cause != "none":
        more.append(next_action("retry_job", "queue it again (dry run first)", job_id=args.job_id, dry_run=True))
    return Result(found.summary, found, more)


TOOLS = [
    Tool(name="diagnose_run", title="Diagnose run", description="A run diagnosed by deterministic rules: "
         "convergence, overfitting, instability, stalls, throughput against GPU use; each finding with evidence.",
         args=a.RunArgs, reply=RunDiagnosis, handler=diagnose_run),
    Tool(name="compare_runs", title="Compare runs", description="2 to 10 runs compared: every metric they share, "
         "where each departs from the baseline (the departures first), best value and step, throughput, GPU use, "
         "config differences.", args=a.CompareRunsArgs, reply=RunComparison,
         handler=compare_runs),
    Tool(name="compare_checkpoints", title="Compare checkpoints", description="2 to 10 checkpoints compared: the "
         "metric at their steps, evaluations, size, lineage.", args=a.CompareCheckpointsArgs,
         reply=CheckpointComparison, handler=compare_checkpoints),
    Tool(name="get_best_checkpoint", title="Best checkpoint", description="The best checkpoint over an "
         "experiment's runs by its primary metric (or metric=), its file verified present.",
         args=a.BestCheckpointArgs, reply=BestCheckpoint, handler=get_best_checkpoint),
    Tool(name="explain_failure", title="Explain failure", description="Why a job's latest attempt failed, "
         "classified (OOM, NaN, timeout, lost node...), with the log lines and GPU samples that show it.",
         args=a.JobArgs, reply=FailureExplanation, handler=explain_failure),
]
