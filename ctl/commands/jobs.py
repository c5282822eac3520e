"""Jobs: ``gpuplanectl job submit|list|show|cancel|retry`` (``gpuplanectl.main`` puts the
``job`` noun together, with ``logs`` and ``explain`` from their modules).

The hidden old spellings ``start JOB`` and ``stop JOB`` (an argument that starts with
``job_``) are ``job retry`` and ``job cancel``; ``gpuplanectl.commands.actors`` hands them over.

Output: a line or table for people; with ``--json`` the API's body (``{"job": ...}`` or
``{"jobs": [...]}``). Exit 2 for a submission the CLI or the daemon rejects (nothing is
created), 1 for a refused verb (``conflict``: cancelling a job that has ended) or an
unknown job.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import quote, urlencode

import typer
from gpuplanectl import render
from gpuplanectl.commands import JsonOption, connect, fail, globals_of, reporting, sweeps
from gpuplanectl.exit_codes import EXIT_FAILURE, EXIT_USAGE
from gpuplanectl.submission import INHERITED_ENV, SubmissionError, build_body, check_folder_here, load_job_file

from gpuplaned.protocol.errors import ErrorCode

POLL_INTERVAL = 0.1
# A cancelled job gets SIGTERM, then SIGKILL after its stop grace; allow this much more.
CANCEL_WAIT_MARGIN = 10.0

JobArgument = Annotated[str, typer.Argument(metavar="JOB", help="A job id (job_...), as `gpuplanectl job list` "
                                                                "lists it.", show_default=False)]

SUBMIT_EPILOG = (
    "Environment: the job gets this shell's "
    + ", ".join(INHERITED_ENV)
    + " (those that are set), so it finds the same programs, virtualenv or conda env and "
    "libraries; then the file's env table; then each --env. Nothing else is passed, from this "
    "shell or from the daemon's own environment: add settings with --env NAME=VALUE, or --env NAME "
    "to pass this shell's value. Put passwords and keys in --secret-env NAME (this shell's value) or "
    "the file's [secrets] table: sealed in the daemon's database, never shown back, never audited, "
    "given only to the job's process. An --env value is shown to tokens that may write (a name "
    "with PASS, AUTH, TOKEN, KEY, SECRET... is hidden, a URL's password masked), and the command's "
    "arguments are shown to every token that may read, as `ps` shows them on the node. The daemon "
    "adds CUDA_VISIBLE_DEVICES (the GPUs it assigns), PYTHONUNBUFFERED=1 and GPUPLANE_* (the job, "
    "its run and attempt, the daemon's address).\n\n"
    "Job file (--file, TOML): the API's keys: command (array, or a string split like a "
    "shell would), cwd (or dir; relative to the file), name, env (table), secrets (table), gpu, "
    "labels, node, "
    "priority, retry, timeout_s, stop_grace_s, type, gpu_model, min_gpu_memory (\"40GiB\", or MiB), "
    "placement. Flags override the file."
)


def submit(
    ctx: typer.Context,
    command: Annotated[list[str] | None, typer.Argument(
        metavar="-- COMMAND", show_default=False,
        help="The program and its arguments, run without a shell (use sh -c '...' for one).")] = None,
    name: Annotated[str | None, typer.Option("--name", metavar="NAME", show_default=False,
                                             help="Default: the program's name.")] = None,
    gpu: Annotated[int | None, typer.Option("--gpu", metavar="N", show_default=False,
                                            help="GPUs to reserve; 0 for a CPU-only job [default: 1].")] = None,
    workdir: Annotated[str | None, typer.Option("--dir", "--cwd", metavar="DIR", show_default=False,
                                            help="Working directory [default: this one].")] = None,
    env: Annotated[list[str] | None, typer.Option("--env", "-e", metavar="NAME=VALUE", show_default=False,
                                                  help="Set a variable (repeatable); NAME alone passes this shell's value.")] = None,
    secret_env: Annotated[list[str] | None, typer.Option(
        "--secret-env", metavar="NAME[=VALUE]", show_default=False,
        help="Give the job a secret variable (repeatable): sealed at rest, never shown nor audited. NAME alone "
             "passes this shell's value, which keeps it out of this command's own argv.")] = None,
    label: Annotated[list[str] | None, typer.Option("--label", "-l", metavar="LABEL", show_default=False,
                                                    help="Run only on nodes with this label (repeatable).")] = None,
    node: Annotated[str | None, typer.Option("--node", metavar="NAME", show_default=False,
                                             help="Run only on this node.")] = None,
    gpu_model: Annotated[str | None, typer.Option(
        "--gpu-model", metavar="TEXT", show_default=False,
        help="Only GPUs whose model contains TEXT, any case (A100, 4090); every GPU the job gets.")] = None,
    min_gpu_memory: Annotated[str | None, typer.Option(
        "--min-gpu-memory", metavar="SIZE", show_default=False,
        help="Only GPUs with at least this much memory each: 40GiB, 24G, 16000 (MiB).")] = None,
    placement: Annotated[str | None, typer.Option(
        "--placement", metavar="pack|spread", show_default=False,
        help="pack: the node with the fewest free GPUs that fit; spread: the most [default: the daemon's].")] = None,
    priority: Annotated[int | None, typer.Option("--priority", "-p", metavar="P", show_default=False,
                                                 help="Higher runs first [default: 0].")] = None,
    retry: Annotated[int | None, typer.Option("--retry", metavar="N", show_default=False,
                                              help="Run again up to N times if it fails [default: 0].")] = None,
    timeout: Annotated[float | None, typer.Option("--timeout", metavar="SECONDS", show_default=False,
                                                  help="Stop it after this long (fails with TIMEOUT).")] = None,
    grace: Annotated[float | None, typer.Option("--grace", metavar="SECONDS", show_default=False,
                                                help="From SIGTERM to SIGKILL when stopping it [default: 10].")] = None,
    type_: Annotated[str | None, typer.Option("--type", metavar="TYPE", show_default=False,
                                              help="TRAIN (default), EVALUATE, INFERENCE, EXPORT or CUSTOM.")] = None,
    file: Annotated[Path | None, typer.Option("--file", metavar="JOB.TOML", show_default=False,
                                              help="Read the job from a TOML file; flags override it.")] = None,
    ckpt_dir: Annotated[list[str] | None, typer.Option(
        "--ckpt-dir", metavar="DIR", show_default=False,
        help="Also look for checkpoints the job saves here (repeatable), besides checkpoints/, outputs/ and "
             "runs/ under its working directory.")] = None,
    tb_dir: Annotated[list[str] | None, typer.Option(
        "--tb-dir", metavar="DIR", show_default=False,
        help="Also read TensorBoard event files the job writes here (repeatable), besides runs/, logs/, outputs/, "
             "lightning_logs/ and $TB_LOG_DIR under its working directory.")] = None,
    on_oom_retry: Annotated[int | None, typer.Option(
        "--on-oom-retry", metavar="N", min=1, show_default=False,
        help="After running out of memory, queue it again up to N times.")] = None,
    on_oom_half: Annotated[list[str] | None, typer.Option(
        "--on-oom-half", metavar="NAME", show_default=False,
        help="With each OOM retry, halve the job's integer variable NAME (repeatable).")] = None,
    on_nan: Annotated[str | None, typer.Option("--on-nan", metavar="stop", show_default=False,
                                               help="stop: SIGTERM it when its loss turns NaN.")] = None,
    on_lost: Annotated[str | None, typer.Option("--on-lost", metavar="requeue", show_default=False,
                                                help="requeue: queue it again when it is lost.")] = None,
    on_preempted: Annotated[str | None, typer.Option(
        "--on-preempted", metavar="last|best", show_default=False,
        help="Killed from outside (SIGTERM, SIGKILL): queue it again resuming from that checkpoint.")] = None,
    after: Annotated[list[str] | None, typer.Option(
        "--after", metavar="JOB[,JOB...]", show_default=False,
        help="Run once these jobs all SUCCEEDED; if one fails or is cancelled, this one is cancelled "
             "(DEPENDENCY_FAILED), and so are the jobs that wait for it.")] = None,
    after_any: Annotated[list[str] | None, typer.Option(
        "--after-any", metavar="JOB[,JOB...]", show_default=False,
        help="Run once these jobs all ended, whatever the outcome.")] = None,
    after_failed: Annotated[list[str] | None, typer.Option(
        "--after-failed", metavar="JOB[,JOB...]", show_default=False,
        help="Run once these jobs all ended, only if one did not succeed (a clean-up or a notifier); "
             "cancelled if they all succeeded.")] = None,
    group: Annotated[str | None, typer.Option(
        "--group", metavar="NAME", show_default=False,
        help="Put it in this group: at most the group's parallel limit of its jobs run at once, none starts while "
             "it is paused (gpuplanectl group set|pause|resume); made on first use.")] = None,
    sweep: Annotated[list[str] | None, typer.Option(
        "--sweep", metavar="NAME=V1,V2", show_default=False,
        help="Make a sweep: one trial per combination of the values (repeatable, a grid); {NAME} in the "
             "command's arguments becomes the trial's value, and it gets GPUPLANE_SWEEP_NAME (upper-cased), "
             "GPUPLANE_SWEEP_ID and GPUPLANE_SWEEP_TRIAL. --name names the sweep.")] = None,
    sweep_random: Annotated[list[str] | None, typer.Option(
        "--sweep-random", metavar="NAME=DIST", show_default=False,
        help="A random sweep (repeatable, with --trials): DIST is uniform:LO:HI, log:LO:HI, int:LO:HI or "
             "choice:A,B.")] = None,
    trials: Annotated[int | None, typer.Option("--trials", metavar="N", min=1, show_default=False,
                                               help="A random sweep's number of trials.")] = None,
    seed: Annotated[int | None, typer.Option("--seed", metavar="S", min=0, show_default=False,
                                             help="A random sweep's seed: the same seed draws the same trials "
                                                  "[default: 0].")] = None,
    sweep_file: Annotated[Path | None, typer.Option(
        "--sweep-file", metavar="SWEEP.TOML", show_default=False,
        help="The sweep's parameters from a file: [grid], [random] (with trials and seed) or [[trials]] tables, "
             "and name, metric, goal, max_parallel; flags win.")] = None,
    max_parallel: Annotated[int | None, typer.Option(
        "--max-parallel", metavar="K", min=1, show_default=False,
        help="Run at most K of the sweep's trials at once (Slurm's %K).")] = None,
    metric: Annotated[str | None, typer.Option(
        "--metric", metavar="NAME", show_default=False,
        help="The sweep's primary metric: each trial's best and the best combination (sweep show).")] = None,
    goal: Annotated[str | None, typer.Option("--goal", metavar="min|max", show_default=False,
                                             help="Whether the metric's lowest or highest is best [default: min].")
                    ] = None,
    early_stop: Annotated[str | None, typer.Option(
        "--early-stop", metavar="median|asha", show_default=False,
        help="Stop trials whose metric falls behind the others' (SIGTERM with their grace).")] = None,
    min_steps: Annotated[int | None, typer.Option("--min-steps", metavar="N", min=0, show_default=False,
                                                  help="With --early-stop: judge no trial before step N.")] = None,
    early_stop_grace: Annotated[float | None, typer.Option(
        "--early-stop-grace", metavar="SECONDS", min=0, show_default=False,
        help="With --early-stop: judge no trial in its first SECONDS of running.")] = None,
    retry_on: Annotated[str | None, typer.Option(
        "--retry-on", metavar="CAUSES[:N]", show_default=False,
        help="Retry a trial that fails for one of these causes only, up to N times [default: 1]: "
             "oom,preempted,lost:3 (preempted: killed from outside).")] = None,
    dry_run: Annotated[bool, typer.Option(
        "--dry-run", help="Say where it would run, or why it would wait or be refused, and queue nothing.")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Print only the job id.")] = False,
    json_output: JsonOption = False,
) -> None:
    """Queue a job: a command to run on a node's GPUs.

    Options come before the command; everything after `--` (or after the first word that
    is not an option) is the command: `gpuplanectl job submit --gpu 2 -- python train.py --lr 0.1`.

    Prints the job's id and status; --json the job.

    With --sweep, --sweep-random or --sweep-file it makes a sweep instead, in one request
    however many trials: each trial a job of this command with its values (`gpuplanectl sweep`
    follows it). Prints the sweep's id and its trials queued; --dry-run lists the trials and
    the worst-case GPU-hours.
    """
    g = globals_of(ctx)
    flags = {"command": command, "name": name, "gpu": gpu, "dir": workdir, "env": env, "secret_env": secret_env,
             "labels": label,
             "node": node, "priority": priority, "retry": retry, "timeout_s": timeout,
             "stop_grace_s": grace, "type": type_, "ckpt_dirs": ckpt_dir, "tb_dirs": tb_dir,
             "on_oom_retry": on_oom_retry, "on_oom_half": on_oom_half, "on_nan": on_nan, "on_lost": on_lost,
             "on_preempted": on_preempted, "gpu_model": gpu_model, "min_gpu_memory": min_gpu_memory,
             "placement": placement, "after": after, "after_any": after_any, "after_failed": after_failed,
             "group": group}
    try:
        here = os.getcwd()
    except FileNotFoundError:  # the shell's folder was deleted under it
        fail(json_output, ErrorCode.BAD_REQUEST, "this shell's current directory no longer exists (deleted?): cd to "
             "a folder that does, and submit from there", {"field": "cwd"}, exit_code=EXIT_USAGE)
    try:
        file_body = load_job_file(file) if file is not None else {}
        body = build_body(file_body, flags, environ=os.environ, cwd=here)
        check_folder_here(body, flags, file_body, file)
    except SubmissionError as exc:
        fail(json_output, ErrorCode.BAD_REQUEST, str(exc), exc.details(), exit_code=EXIT_USAGE)
    sweep_flags = {"sweep": sweep, "sweep_random": sweep_random, "trials": trials, "seed": seed,
                   "sweep_file": sweep_file, "max_parallel": max_parallel, "metric": metric, "goal": goal,
                   "early_stop": early_stop, "min_steps": min_steps, "grace_s": early_stop_grace,
                   "retry_on": retry_on}
    if sweeps.wanted(sweep_flags) or any(v is not None for k, v in sweep_flags.items()):
        _submit_sweep(g, body, sweep_flags, dry_run=dry_run, quiet=quiet, json_output=json_output)
        return
    if dry_run:
        with reporting(g, json_output):
            plan = connect(g).post("/api/v1/jobs?dry_run=true", body)["plan"]
        if json_output:
            render.print_json({"plan": plan})
        else:
            print(render.submit_plan(plan))
        raise typer.Exit(EXIT_FAILURE if plan["would"] == "refuse" else 0)
    with reporting(g, json_output):
        job = connect(g).post("/api/v1/jobs", body)["job"]
    if json_output:
        render.print_json({"job": job})
    elif quiet:
        print(job["id"])
    elif job.get("failure_message") and job["status"] in render.ENDED:  # a dependency that failed already
        print(f"{job['id']} {job['status']} ({job.get('failure_reason')}): {render.printable(job['failure_message'])}")
    elif job.get("queue_reason"):
        print(f"{job['id']} {job['status']}: waits, {render.printable(job['queue_reason'])}")
    else:
        print(f"{job['id']} {job['status']}")


def _submit_sweep(g: Any, job: dict[str, Any], flags: dict[str, Any], *, dry_run: bool, quiet: bool,
                  json_output: bool) -> None:
    if not sweeps.wanted(flags):
        given = next(k for k, v in flags.items() if v is not None)
        fail(json_output, ErrorCode.BAD_REQUEST, f"--{given.replace('_', '-')} goes with a sweep: give --sweep, "
             "--sweep-random or --sweep-file", {"flag": given}, exit_code=EXIT_USAGE)
    try:
        body = sweeps.sweep_body(job, flags)
    except sweeps.SweepError as exc:
        sweeps.refuse(json_output, exc)
    sweeps.submit(g, body, dry_run=dry_run, quiet=quiet, json_output=json_output, file=flags["sweep_file"])


def jobs(
    ctx: typer.Context,
    status: Annotated[str | None, typer.Option("--status", metavar="STATE[,STATE]", show_default=False,
                                               help="Only jobs in these states, e.g. QUEUED,RUNNING.")] = None,
    group: Annotated[str | None, typer.Option("--group", metavar="NAME", show_default=False,
                                              help="Only this group's jobs (job submit --group).")] = None,
    sweep: Annotated[str | None, typer.Option("--sweep", metavar="SWEEP", show_default=False,
                                              help="Only this sweep's trials (swp_...).")] = None,
    limit: Annotated[int, typer.Option("--limit", "-n", metavar="N", min=1, help="The newest N jobs.")] = 100,
    json_output: JsonOption = False,
) -> None:
    """List jobs, newest first.

    GPUS: the indexes a job holds (or held), else how many it asks for in parentheses,
    `cpu` for a CPU-only job. EXIT/REASON: the exit code, or why it failed (TIMEOUT, OOM,
    SIGNAL(SIGSEGV), LOST, SPAWN_FAILED, SHIM_DIED, DEPENDENCY_FAILED). WAIT, when a queued
    job says why it waits: the jobs it runs after (`after job_... (RUNNING)`), what no node has,
    its group or the queue holding it (`group train: 2 of 2 running`, `group train paused`,
    `queue paused`), its sweep holding it (`sweep max-parallel 4 reached`, `sweep lr-study
    paused`), or a GPU no job holds that takes none for now (`GPU 1: foreign process
    4 GiB (pid 123)`, `GPU 0: busy 87% (median of the last 5 samples, over max_free_util 10%)`).
    """
    g = globals_of(ctx)
    query: dict[str, Any] = {"limit": limit}
    if status:
        query["status"] = status.upper()
    if group:
        query["group"] = group
    if sweep:
        query["sweep"] = sweep
    with reporting(g, json_output, {"group": "--group", "sweep": "--sweep"}):
        listed = connect(g).get(f"/api/v1/jobs?{urlencode(query)}")["jobs"]
    if json_output:
        render.print_json({"jobs": listed})
    elif listed:
        print(render.job_table(listed))
    else:
        print("no jobs" + (f" in {status.upper()}" if status else ""))


def _path(job_id: str) -> str:
    return f"/api/v1/jobs/{quote(job_id, safe='')}"


def show(ctx: typer.Context, job_id: JobArgument, json_output: JsonOption = False) -> None:
    """Show everything about a job (--json: with its environment)."""
    g = globals_of(ctx)
    with reporting(g, json_output):
        job = connect(g).get(_path(job_id))["job"]
    if json_output:
        render.print_json({"job": job})
    else:
        print(render.job_detail(job))


def cancel(
    ctx: typer.Context,
    job_id: JobArgument,
    json_output: JsonOption = False,
    wait: Annotated[bool, typer.Option("--wait/--no-wait", help="Wait until the job has ended.")] = False,
) -> None:
    """Cancel a job: dequeue it, or stop it (SIGTERM, then SIGKILL after its stop grace).

    Exits 1 when the job has already ended.
    """
    cancel_job(ctx, job_id, json_output, wait=wait)


def retry(
    ctx: typer.Context,
    job_id: JobArgument,
    resume_from: Annotated[str | None, typer.Option(
        "--resume-from", metavar="best|last|CKPT", show_default=False,
        help="Resume from a checkpoint of the job's lineage: best (by the primary metric), last (the newest "
             "saved) or its id. The attempt gets GPUPLANE_RESUME_FROM (the path) and GPUPLANE_RESUME_STEP.")] = None,
    with_dependants: Annotated[bool, typer.Option(
        "--with-dependants",
        help="Also queue again, behind it, the jobs cancelled because it failed (DEPENDENCY_FAILED), and "
             "theirs.")] = False,
    json_output: JsonOption = False,
) -> None:
    """Queue an ended job again, as its next attempt (afresh, or resumed from a checkpoint).

    Exits 1 while the job has not ended, when the checkpoint cannot be resumed from
    (none yet, another job's, deleted, its file gone), or when a dependency it needs has
    failed (retry that one --with-dependants).
    """
    retry_job(ctx, job_id, json_output, resume_from=resume_from, with_dependants=with_dependants)


def cancel_job(ctx: typer.Context, job_id: str, json_output: bool, *, wait: bool = False) -> None:
    g = globals_of(ctx)
    with reporting(g, json_output):
        client = connect(g)
        job = client.post(f"{_path(job_id)}/cancel")["job"]
        if wait:
            deadline = time.monotonic() + (job.get("stop_grace_s") or 0) + CANCEL_WAIT_MARGIN
            while job["status"] not in render.ENDED and time.monotonic() < deadline:
                time.sleep(POLL_INTERVAL)
                job = client.get(_path(job_id))["job"]
    _report(job, json_output)
    if wait and job["status"] not in render.ENDED:
        render.print_error(f"job {job_id} has not ended yet: it is {job['status']}")
        raise typer.Exit(EXIT_FAILURE)


def retry_job(ctx: typer.Context, job_id: str, json_output: bool, *, resume_from: str | None = None,
              with_dependants: bool = False) -> None:
    g = globals_of(ctx)
    body: dict[str, Any] = {}
    if resume_from:
        body["resume_from"] = resume_from
    if with_dependants:
        body["with_dependants"] = True
    with reporting(g, json_output):
        job = connect(g).post(f"{_path(job_id)}/retry", body or None)["job"]
    _report(job, json_output)
    if resume_from and not json_output:
        print(f"resumes from {job['resume_from']}")
    if with_dependants and not json_output:
        back = [link["job_id"] for link in job.get("dependants") or [] if link["status"] == "QUEUED"]
        print(f"queued again behind it: {', '.join(back)}" if back else "no dependant was queued again")


def _report(job: dict[str, Any], json_output: bool) -> None:
    if json_output:
        render.print_json({"job": job})
    else:
        print(render.job_line(job))
