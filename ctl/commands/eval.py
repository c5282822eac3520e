"""Evaluations: ``gpuplanectl ckpt eval CKPT [--gpu N] [--suite S] [--dataset D] -- CMD`` queues
one, ``gpuplanectl ckpt evals CKPT`` (or ``--experiment EXP``) lists them (``eval`` and
``evals``, the hidden old spellings, stay for scripts).

``eval`` sends ``POST /api/v1/checkpoints/{id}/evaluations``: an EVALUATE job running CMD
(each ``{checkpoint}`` in it replaced by the checkpoint's path) in the training job's
directory unless ``--dir`` names another, with this shell's PATH, virtualenv and the other
variables ``job submit`` passes. The job finds the checkpoint in ``$GPUPLANE_CHECKPOINT`` and
writes its metrics, one JSON object, to ``$GPUPLANE_EVAL_RESULT`` (or calls the SDK's
``run.log_evaluation``). It prints the evaluation's and the job's ids; ``--json`` the API's body.

``evals`` prints one line per evaluation: status, suite and dataset, runtime, the metrics
(or why it failed). Exit 1 for an unknown or deleted checkpoint, or one whose file is gone.
"""

from __future__ import annotations

import os
from typing import Annotated, Any
from urllib.parse import quote, urlencode

import typer
from gpuplanectl import render
from gpuplanectl.commands import JsonOption, connect, fail, globals_of, reporting
from gpuplanectl.exit_codes import EXIT_USAGE
from gpuplanectl.submission import INHERITED_ENV, SubmissionError, parse_env_pairs

from gpuplaned.protocol.errors import ErrorCode

CheckpointArgument = Annotated[str, typer.Argument(metavar="CKPT", show_default=False,
                                                   help="The checkpoint's id (ck_...), as `gpuplanectl ckpt list RUN` "
                                                        "lists it.")]
_TEXT = {"metavar": "TEXT", "show_default": False}


def evaluate(
    ctx: typer.Context,
    checkpoint_id: CheckpointArgument,
    command: Annotated[list[str] | None, typer.Argument(
        metavar="-- COMMAND", show_default=False,
        help="The program and its arguments after `--`; {checkpoint} is replaced by the checkpoint's path.")] = None,
    gpu: Annotated[int, typer.Option("--gpu", metavar="N", min=0, help="GPUs to reserve; 0 for a CPU slot.")] = 1,
    suite: Annotated[str | None, typer.Option("--suite", **_TEXT, help="The evaluation suite's name.")] = None,
    dataset: Annotated[str | None, typer.Option("--dataset", **_TEXT, help="The dataset evaluated on.")] = None,
    dataset_version: Annotated[str | None, typer.Option("--dataset-version", **_TEXT,
                                                        help="The dataset's version.")] = None,
    name: Annotated[str | None, typer.Option("--name", **_TEXT, help="Default: eval-<checkpoint id>.")] = None,
    workdir: Annotated[str | None, typer.Option("--dir", "--cwd", metavar="DIR", show_default=False,
                                                help="Working directory [default: the training job's].")] = None,
    env: Annotated[list[str] | None, typer.Option("--env", "-e", metavar="NAME=VALUE", show_default=False,
                                                  help="Set a variable (repeatable); NAME alone passes this "
                                                       "shell's value.")] = None,
    node: Annotated[str | None, typer.Option("--node", metavar="NAME", show_default=False,
                                             help="Run only on this node.")] = None,
    timeout: Annotated[float | None, typer.Option("--timeout", metavar="SECONDS", show_default=False,
                                                  help="Stop it after this long.")] = None,
    json_output: JsonOption = False,
) -> None:
    """Evaluate a checkpoint: queue an EVALUATE job running COMMAND on it.

    The job gets GPUPLANE_CHECKPOINT (the checkpoint's path) and GPUPLANE_EVAL_RESULT (a file
    to write its metrics to, as one JSON object of names to numbers). Prints the evaluation's
    id and its job's.
    """
    g = globals_of(ctx)
    if not command:
        fail(json_output, ErrorCode.BAD_REQUEST, "no command to run: give it after `--` "
             "(ckpt eval CKPT -- python eval.py {checkpoint})", {"field": "command"}, exit_code=EXIT_USAGE)
    try:
        variables = {key: os.environ[key] for key in INHERITED_ENV if key in os.environ}
        variables.update(parse_env_pairs(env or (), os.environ))
    except SubmissionError as exc:
        fail(json_output, ErrorCode.BAD_REQUEST, str(exc), exc.details(), exit_code=EXIT_USAGE)
    body: dict[str, Any] = {"command": list(command), "gpu": gpu, "env": variables}
    for key, value in (("suite", suite), ("dataset", dataset), ("dataset_version", dataset_version), ("name", name),
                       ("node", node), ("timeout_s", timeout)):
        if value is not None:
            body[key] = value
    if workdir is not None:
        body["cwd"] = os.path.abspath(os.path.expanduser(workdir))
    with reporting(g, json_output):
        queued = connect(g).post(f"/api/v1/checkpoints/{quote(checkpoint_id, safe='')}/evaluations", body)
    if json_output:
        render.print_json(queued)
    else:
        print(f"{queued['evaluation']['id']} {queued['job']['id']} {queued['job']['status']}")


def evaluations(
    ctx: typer.Context,
    checkpoint_id: Annotated[str | None, typer.Argument(metavar="[CKPT]", show_default=False,
                                                        help="The checkpoint's id (ck_...).")] = None,
    experiment: Annotated[str | None, typer.Option("--experiment", metavar="EXP", show_default=False,
                                                   help="An experiment's evaluations instead (its id, or its name "
                                                        "with --project).")] = None,
    project: Annotated[str | None, typer.Option("--project", metavar="NAME", show_default=False,
                                                help="With --experiment: its project (id or name).")] = None,
    json_output: JsonOption = False,
) -> None:
    """List a checkpoint's evaluations (oldest first), or an experiment's (newest first)."""
    g = globals_of(ctx)
    if (checkpoint_id is None) == (experiment is None):
        raise typer.BadParameter("give a CKPT or --experiment, not both", param_hint="CKPT")
    if experiment is not None:
        query = urlencode({"project": project}) if project else ""
        path = f"/api/v1/experiments/{quote(experiment, safe='')}/evaluations" + (f"?{query}" if query else "")
    else:
        path = f"/api/v1/checkpoints/{quote(str(checkpoint_id), safe='')}/evaluations"
    with reporting(g, json_output):
        found = connect(g).get(path)
    if json_output:
        render.print_json(found)
        return
    if not found["evaluations"]:
        print("no evaluations")
        return
    rows = [(ev["id"], ev["status"], render.printable(ev["suite"] or "-"), render.printable(ev["dataset"] or "-"),
             "-" if ev["checkpoint_step"] is None else str(ev["checkpoint_step"]),
             render.format_number(ev["runtime_s"], ".1f", "s"), _outcome(ev)) for ev in found["evaluations"]]
    print(render.table(("ID", "STATUS", "SUITE", "DATASET", "STEP", "RUNTIME", "METRICS"), rows))


def _outcome(ev: dict[str, Any]) -> str:
    if ev["error"]:
        return render.printable(ev["error"])
    return " ".join(f"{render.printable(k)}={render.format_number(v, '.6g')}" for k, v in sorted(ev["metrics"].items())) or "-"
