"""``gpuplanectl``: the command-line client of gpuplaned (console script ``gpuplanectl = gpuplanectl.main:main``).

This module only composes the app: the global options and one ``app.command`` per verb,
each implemented in ``gpuplanectl.commands.<noun>``. Start-up stays light: nothing here or
below imports trio, quart, hypercorn, httpx, cattrs, pynvml or mcp (a test checks).
"""

from __future__ import annotations

from typing import Annotated

import typer
from gpuplanectl.client import runtime_dir_from
from gpuplanectl.commands import (
    Globals,
    actors,
    audit,
    backup,
    checkpoints,
    ckpt,
    daemon,
    diagnosis,
    eval,
    event_hook,
    events,
    import_run,
    jobs,
    logs,
    mcp_stdio,
    nodes,
    projects,
    runs,
    status,
    sync,
    tokens,
    top,
    ui,
    webhooks,
)

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


app.command("status")(status.status)
app.command("start")(actors.start)
app.command("stop")(actors.stop)
app.command("restart")(actors.restart)
# Options first, then the command: everything from its first word on belongs to the job.
app.command("submit", epilog=jobs.SUBMIT_EPILOG, context_settings={"allow_interspersed_args": False})(jobs.submit)
app.command("jobs")(jobs.jobs)
app.add_typer(jobs.app, name="job")
app.command("logs")(logs.logs)
app.add_typer(nodes.app, name="node")
app.add_typer(tokens.app, name="token")
app.add_typer(webhooks.app, name="webhook")
app.command("events")(events.events)
app.command("event-hook", context_settings={"allow_interspersed_args": False})(event_hook.event_hook)
app.command("runs")(runs.runs)
app.add_typer(runs.app, name="run")
app.command("metrics")(runs.metrics)
app.command("checkpoints")(checkpoints.checkpoints)
app.add_typer(ckpt.app, name="ckpt")
app.command("eval")(eval.evaluate)
app.command("evals")(eval.evaluations)
app.command("import-run")(import_run.import_run)
app.command("diagnose")(diagnosis.diagnose)
app.command("compare")(diagnosis.compare)
app.command("explain")(diagnosis.explain)
app.command("projects")(projects.projects)
app.add_typer(projects.app, name="project")
app.command("sync")(sync.sync)
app.command("top")(top.top)
app.command("daemon")(daemon.daemon)
app.command("shutdown")(daemon.shutdown)
app.command("ui")(ui.ui)
app.command("mcp-stdio")(mcp_stdio.mcp_stdio)
app.command("audit")(audit.audit)
app.command("backup")(backup.backup)
app.command("restore")(backup.restore)


def main() -> None:
    app(prog_name="gpuplanectl")
