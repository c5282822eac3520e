"""``gpuplanectl``: the command-line client of gpuplaned (console script ``gpuplanectl = gpuplanectl.main:main``).

This module only composes the app: the global options, the daemon-wide commands, and one
noun per resource with its verbs (``job submit``, ``ckpt prune``), each implemented in
``gpuplanectl.commands.<module>``. A noun whose verbs come from several modules (job, run,
ckpt) is put together here; one module's noun is that module's ``app``. The spellings from
before the nouns (``submit``, ``checkpoints``, ``start JOB``) stay as hidden aliases.

Start-up stays light: nothing here or below imports trio, quart, hypercorn, httpx, cattrs,
pynvml or mcp (a test checks).
"""

from __future__ import annotations

import copy
import sys
from collections.abc import Sequence
from typing import Annotated

import typer
from gpuplanectl.client import runtime_dir_from
from gpuplanectl.commands import (
    Globals,
    actors,
    audit,
    backup,
    batch_submit,
    checkpoints,
    ckpt,
    daemon,
    diagnosis,
    eval,
    event_hook,
    events,
    groups,
    import_run,
    jobs,
    logs,
    mcp_stdio,
    nodes,
    primary_metric,
    projects,
    runs,
    status,
    sweeps,
    sync,
    tokens,
    top,
    ui,
    webhooks,
)

# Each noun's sub-app: plain help like the root's, and its verbs listed when called bare.
NOUN = {"no_args_is_help": True, "rich_markup_mode": None}
# A command that ends with one to run: from its first word on, everything belongs to it.
COMMAND_LAST = {"allow_interspersed_args": False}

app = typer.Typer(
    name="gpuplanectl",
    help="Control gpuplaned, the GPUPlane daemon, through its local socket or its HTTP front (--server).",
    epilog="Every command takes --json. Exit codes: 0 ok, 1 failure (also: no daemon running), 2 usage.",
    no_args_is_help=True,
    # Plain click help: rich would cost start-up time and eat "[env ...]" as markup.
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)


@app.callback()
def root(
    ctx: typer.Context,
    runtime_dir: Annotated[str | None, typer.Option(
        "--runtime-dir", metavar="DIR", show_default=False,
        help="Where the daemon's socket and port-file live "
             "[env GPUPLANE_RUNTIME_DIR; default $XDG_RUNTIME_DIR/gpuplane, else /tmp/gpuplane-UID].")] = None,
    server: Annotated[str | None, typer.Option(
        "--server", metavar="URL", show_default=False,
        help="Drive the daemon at this http(s):// URL (its HTTP front) instead of the local one "
             "[env GPUPLANE_SERVER].")] = None,
    token: Annotated[str | None, typer.Option(
        "--token", metavar="TOKEN", show_default=False,
        help="The API token for the server (`gpuplanectl token create`) [env GPUPLANE_TOKEN, "
             "which unlike a flag does not show in ps].")] = None,
    profile: Annotated[str | None, typer.Option(
        "--profile", metavar="NAME", show_default=False,
        help="Server and token from [profiles.NAME] in $XDG_CONFIG_HOME/gpuplane/ctl.toml "
             "[env GPUPLANE_PROFILE; default: its default_profile].")] = None,
) -> None:
    ctx.obj = Globals.from_options(ctx, runtime_dir_from(runtime_dir), explicit=runtime_dir is not None,
                                   server=server, token=token, profile=profile)


# Daemon-wide commands, at the top like supervisorctl's.
app.command("status")(status.status)
app.command("top")(top.top)
app.command("events")(events.events)
app.command("event-hook", context_settings=COMMAND_LAST)(event_hook.event_hook)
app.command("daemon")(daemon.daemon)
app.command("shutdown")(daemon.shutdown)
app.command("ui")(ui.ui)
app.command("mcp-stdio")(mcp_stdio.mcp_stdio)
app.command("sync")(sync.sync)
app.command("audit")(audit.audit)
app.command("backup")(backup.backup)
app.command("restore")(backup.restore)

# One noun per resource, each with its verbs.
job = typer.Typer(name="job", help="Submit jobs, list them, show one, print its logs, cancel, retry or explain it.",
                  **NOUN)
job.command("submit", epilog=jobs.SUBMIT_EPILOG, context_settings=COMMAND_LAST)(jobs.submit)
job.command("submit-batch")(batch_submit.submit_batch)
job.command("list")(jobs.jobs)
job.command("show")(jobs.show)
job.command("logs")(logs.logs)
job.command("cancel")(jobs.cancel)
job.command("retry")(jobs.retry)
job.command("priority")(groups.priority)
job.command("remove")(groups.remove)
job.command("explain")(diagnosis.explain)
app.add_typer(job)

run = typer.Typer(name="run", help="List runs, show one with its metrics, logs and diagnosis, compare runs, "
                                   "import a finished one.", **NOUN)
run.command("list")(runs.runs)
run.command("show")(runs.show)
run.command("metrics")(runs.metrics)
run.command("logs")(logs.run_logs)
run.command("diagnose")(diagnosis.diagnose)
run.command("compare")(diagnosis.compare)
run.command("import")(import_run.import_run)
app.add_typer(run)

checkpoint = typer.Typer(name="ckpt", help="List a run's checkpoints, find an experiment's best, verify one's "
                                           "file, prune a run's, evaluate one.", **NOUN)
checkpoint.command("list")(checkpoints.list_checkpoints)
checkpoint.command("best")(checkpoints.best)
checkpoint.command("verify")(ckpt.verify)
checkpoint.command("prune")(ckpt.prune)
checkpoint.command("eval")(eval.evaluate)
checkpoint.command("evals")(eval.evaluations)
app.add_typer(checkpoint)

for noun in (projects, primary_metric, nodes, tokens, webhooks, actors):
    app.add_typer(noun.app)
app.add_typer(groups.group_app)
app.add_typer(groups.queue_app)
app.add_typer(sweeps.app)
app.command("clean")(groups.clean)

# Earlier spellings, hidden from --help but kept so that scripts go on working: each runs the
# same function as its new spelling (start and stop also take a job id, as they did).
app.command("start", hidden=True)(actors.start)
app.command("stop", hidden=True)(actors.stop)
app.command("restart", hidden=True)(actors.restart)
app.command("submit", hidden=True, epilog=jobs.SUBMIT_EPILOG, context_settings=COMMAND_LAST)(jobs.submit)
app.command("jobs", hidden=True)(jobs.jobs)
app.command("logs", hidden=True)(logs.logs)
app.command("explain", hidden=True)(diagnosis.explain)
app.command("runs", hidden=True)(runs.runs)
app.command("metrics", hidden=True)(runs.metrics)
app.command("diagnose", hidden=True)(diagnosis.diagnose)
app.command("compare", hidden=True)(diagnosis.compare)
app.command("import-run", hidden=True)(import_run.import_run)
app.command("checkpoints", hidden=True)(checkpoints.checkpoints)
app.command("eval", hidden=True)(eval.evaluate)
app.command("evals", hidden=True)(eval.evaluations)
app.command("projects", hidden=True)(projects.projects)


# The root's options that take a value (``root``'s), skipped to find the command word.
VALUED_ROOT_OPTIONS = ("--runtime-dir", "--server", "--token", "--profile")


def command_word(args: Sequence[str]) -> str | None:
    """The command or noun ``args`` run, after the root's options; None: none (the root's own
    --help, or an option the root does not have: the whole app answers those)."""
    rest = iter(args)
    for arg in rest:
        if arg in VALUED_ROOT_OPTIONS:
            next(rest, None)
        elif arg.startswith(tuple(f"{o}=" for o in VALUED_ROOT_OPTIONS)):
            continue
        elif arg.startswith("-"):
            return None
        else:
            return arg
    return None


def only(name: str | None) -> typer.Typer | None:
    """The app with the root's options and only the command or noun ``name`` (None: no such
    name). Typer makes every command's click object at each start, reading the annotations of
    all ~180 command functions (0.12 to 0.18 s of a 0.3 s start on a 2-core box); a run needs
    only its own, so ``gpuplanectl job submit --sweep ...`` starts that much sooner."""
    commands = [c for c in app.registered_commands if c.name == name]
    groups = [g for g in app.registered_groups if g.typer_instance and g.typer_instance.info.name == name]
    if not commands and not groups:
        return None
    trimmed = copy.copy(app)
    trimmed.registered_commands, trimmed.registered_groups = commands, groups
    return trimmed


def main() -> None:
    (only(command_word(sys.argv[1:])) or app)(prog_name="gpuplanectl")
