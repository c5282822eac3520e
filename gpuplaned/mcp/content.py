"""Resources and prompts: a run's summary as a resource, and the ``study`` prompt that walks an
agent through a study and tells it the budget its token has."""

from __future__ import annotations

import json
import re
from typing import Any

import mcp_types as types

from gpuplaned.mcp import playbooks
from gpuplaned.protocol.converter import unstructure
from gpuplaned.protocol.errors import ApiError, ErrorCode
from gpuplaned.service.api import runs

SUMMARY_TEMPLATE = "gpuplane://runs/{run_id}/summary"
_SUMMARY_URI = re.compile(r"^gpuplane://runs/(run_[0-9A-Za-z]{1,64})/summary$")

TEMPLATES = [types.ResourceTemplate(
    name="run-summary", uri_template=SUMMARY_TEMPLATE, mime_type="application/json",
    description="A run's summary: progress (step, ETA), latest and best per metric, trends, health warnings.")]


RESOURCES = [playbooks.SWEEP_RESOURCE]  # a run's summary is a template: one per run would be unbounded


async def read_resource(shared: Any, uri: str) -> types.ReadResourceResult:
    if uri == playbooks.SWEEP_URI:
        return playbooks.sweep_resource()
    match = _SUMMARY_URI.match(uri)
    if match is None:
        raise ApiError(ErrorCode.NOT_FOUND, f"no resource {uri!r} (the template: {SUMMARY_TEMPLATE}; and "
                       f"{playbooks.SWEEP_URI})", {"uri": uri})
    await runs.get_run(shared, match[1])
    summary = await runs.get_summary(shared, match[1])
    return types.ReadResourceResult(contents=[types.TextResourceContents(
        uri=uri, mime_type="application/json", text=json.dumps(unstructure(summary), separators=(",", ":")))])


STUDY = types.Prompt(name="study", title="Run a study", description="How to run a training study with these tools "
                     "cheaply: submit, wait, diagnose, compare, pick the best checkpoint, evaluate; and this token's "
                     "budget.", arguments=[types.PromptArgument(name="goal", description="what the study is for",
                                                                required=False)])

_WORKFLOW = """You run training jobs on the user's GPUs through GPUPlane. Work in this order:
1. Check capacity: list_nodes. Submit with submit_job (dry_run=true first to see the node, GPUs, queue position and budget).
2. submit_job answers at once with a task handle. Do not sleep in a loop: call wait_for_events (cursor from list_events or the last wait, job_id, types RUN_FINISHED, JOB_FAILED (every failed attempt, OOM and timeouts included), timeout_s up to 50) and repeat it; or poll get_job / get_run_summary no more often than the handle's poll_interval_ms.
3. While it runs: get_run_summary (step, loss, ETA, warnings) is cheap; query_metrics with a small max_points reads the curves with statistics first; tail_logs with grep and max_lines reads the output.
4. When it ends: diagnose_run; on a failure explain_failure then retry_job (resume_from=best or last).
5. Compare: compare_runs for runs, compare_checkpoints for checkpoints, get_best_checkpoint for the experiment's best.
6. Evaluate the best with evaluate_checkpoint and read list_evaluations.
For many runs over a grid of values use submit_sweep, not a loop of submit_job: read the run_sweep_safely prompt first.
cancel_job, cancel_sweep, remove_job and clean_jobs ask the user to confirm unless the token allows unattended use."""


def _budget(caller: Any) -> str:
    if caller is None:
        return "This is the local user's own session (the control socket): no token limits apply."
    limits = getattr(caller, "limits", None)
    scopes = ", ".join(caller.scopes)
    if limits is None:
        return f"This token ({caller.name}) has scopes {scopes} and no limits."
    set_ = {k: v for k, v in unstructure(limits).items() if v not in (None, False, [], ())}
    words = ", ".join(f"{k}={v}" for k, v in set_.items()) or "none"
    return (f"This token ({caller.name}) has scopes {scopes} and limits: {words}. A submit whose worst case "
            f"(GPUs x timeout) exceeds the GPU-hour budget left is refused; dry_run shows the budget after.")


def study(caller: Any, goal: str | None) -> types.GetPromptResult:
    text = _WORKFLOW + "\n\n" + _budget(caller) + (f"\n\nThe study's goal: {goal}" if goal else "")
    return types.GetPromptResult(description=STUDY.description, messages=[
        types.PromptMessage(role="user", content=types.TextContent(type="text", text=text))])


PROMPTS = [STUDY, playbooks.SWEEP_PROMPT]


def get_prompt(caller: Any, name: str, arguments: dict[str, Any]) -> types.GetPromptResult:
    goal = arguments.get("goal")
    if name == STUDY.name:
        return study(caller, goal)
    if name == playbooks.SWEEP_PROMPT.name:
        return playbooks.sweep_prompt(_budget(caller), goal)
    raise ApiError(ErrorCode.NOT_FOUND, f"no prompt {name!r} (there are: {', '.join(p.name for p in PROMPTS)})")
