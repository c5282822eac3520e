"""The playbook "run a sweep safely" (issue 31 item 7), served as an MCP prompt and a resource.

Not as an MCP skill: the Skills extension (SEP-2640: ``skills/list``, ``skills/get``,
``skill://`` resources) has no support in the pinned ``mcp`` SDK (2.3.0 has no skill anywhere in
its source), so the same text goes out the two ways every client already reads. The prompt adds
what the caller's token may spend.
"""

from __future__ import annotations

from typing import Any

import mcp_types as types

SWEEP_URI = "gpuplane://playbooks/run-a-sweep-safely"

SWEEP_TEXT = """# Run a sweep safely

A sweep is one job per combination of values, kept by the daemon. It can spend many GPU-hours
at once, so:

1. **Dry run first.** Call submit_sweep with the whole body and `dry_run: true`: `job` (its
   command with `{NAME}` where each value goes, `cwd`, `gpu`, and always `timeout_s`), one of
   `grid`, `random` with `trials` and `seed`, or `trials_list`, and `max_parallel`, `metric`,
   `goal`. Nothing is queued. Read `created` (trials it would queue), `existing` (already there),
   `worst_case_gpu_hours` (trials x GPUs x timeout) and `budget_after_gpu_hours`.
2. **Check the worst case against the budget.** If `budget_after_gpu_hours` would fall below 0,
   or the worst case is more than the user agreed to spend, make it smaller: fewer values, fewer
   random trials, a shorter `timeout_s`, fewer GPUs per trial. A sweep beyond the budget is
   refused whole: nothing is queued, and the error names the worst case and what remains.
3. **Throttle it.** Set `max_parallel` (at most the free GPUs list_nodes shows, often fewer):
   the first trials tell you early whether the script works, and the box stays usable.
4. **Say what good is, and opt in to stopping.** `metric` and `goal` (min or max) pick the best
   trial. `early_stop` (`rule` median or asha, `min_steps`, `grace_s`) stops trials that fall
   behind, never the best one. `retry_on` (`causes` OOM, PREEMPTED, LOST, and `times`) retries
   only those failures.
5. **Submit** the same body without `dry_run`. The same name and values never queue a trial
   twice, so a retried call is safe; a bigger grid under the same name adds only the new
   combinations.
6. **Watch, don't sleep.** get_sweep gives the status, the counts, the best combination so far
   and each trial's values, best value and why it waits ("sweep max-parallel 4 reached"). Between
   looks, wait_for_events with types RUN_FINISHED, JOB_FAILED, EARLY_STOPPED and SWEEP_PAUSED.
   list_jobs with `sweep` pages through the trials as jobs.
7. **When trials fail early.** Three trials failing within their first minute pause the sweep
   (its `pause_reason` says so). Read explain_failure and tail_logs of one; fix the cause; then
   ask the user to resume it (`gpuplanectl sweep resume ID`), or cancel it and submit the fixed
   sweep under a new name.
8. **Cancel** with cancel_sweep (`dry_run: true` first says how many trials it stops): its
   queued trials go at once, its running ones get SIGTERM and their grace. It asks the user to
   confirm unless the token allows unattended use.
9. **Read the result.** get_sweep's `best`; compare_runs over the best trials' runs;
   get_best_checkpoint in the sweep's experiment; evaluate_checkpoint on the winner.
"""

SWEEP_RESOURCE = types.Resource(
    name="run-a-sweep-safely", title="Run a sweep safely", uri=SWEEP_URI, mime_type="text/markdown",
    description="Playbook: dry run, worst-case GPU-hours against the budget, max_parallel, watching with "
                "get_sweep, early stopping, cancelling.")

SWEEP_PROMPT = types.Prompt(
    name="run_sweep_safely", title="Run a sweep safely", description="How to run a hyperparameter sweep within "
    "this token's budget: dry run, worst case, max_parallel, watch, early stopping, cancel.",
    arguments=[types.PromptArgument(name="goal", description="what the sweep is for", required=False)])


def sweep_resource() -> types.ReadResourceResult:
    return types.ReadResourceResult(contents=[types.TextResourceContents(uri=SWEEP_URI, mime_type="text/markdown",
                                                                         text=SWEEP_TEXT)])


def sweep_prompt(budget: str, goal: Any) -> types.GetPromptResult:
    text = SWEEP_TEXT + "\n" + budget + (f"\n\nThe sweep's goal: {goal}" if goal else "")
    return types.GetPromptResult(description=SWEEP_PROMPT.description, messages=[
        types.PromptMessage(role="user", content=types.TextContent(type="text", text=text))])
