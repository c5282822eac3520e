"""Sweeps (issue 31 item 3): ``gpuplanectl job submit --sweep ...`` makes one, and
``gpuplanectl sweep list|show|cancel|pause|resume|retry-failed`` follows it.

A sweep is one ``POST /api/v1/sweeps``, however many trials it has: the daemon expands the
parameters, makes each trial a job and keeps the sweep, so this shell may end at once. The
parameters come from the flags (``--sweep NAME=V1,V2`` for a grid, ``--sweep-random
NAME=DIST --trials N --seed S``) or from ``--sweep-file sweep.toml``; the job is the one
``job submit`` would queue, its ``{NAME}`` arguments replaced by each trial's values.

``--json`` prints the API's body. Exit 2 for bad parameters (nothing is made; the message names
the flag or the file's key), 1 for an unknown sweep or a refused change.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import quote

import typer
from gpuplanectl import render
from gpuplanectl.commands import JsonOption, connect, fail, globals_of, reporting
from gpuplanectl.exit_codes import EXIT_USAGE

from gpuplaned.protocol.errors import ErrorCode

NOUN = {"no_args_is_help": True, "rich_markup_mode": None}
app = typer.Typer(name="sweep", help="Follow sweeps (job submit --sweep): list them, show one's trials and best, "
                                     "cancel, pause, resume or retry its failed trials.", **NOUN)  # type: ignore[arg-type]

_SWEEP = Annotated[str, typer.Argument(metavar="SWEEP", show_default=False,
                                       help="A sweep id (swp_...), as `gpuplanectl sweep list` shows it.")]
RETRY_CAUSES = ("oom", "preempted", "lost")
FILE_KEYS = ("name", "metric", "goal", "max_parallel", "experiment", "grid", "random", "trials", "early_stop",
             "retry_on")
SHOWN_TRIALS = 20  # a dry run's trials listed before "... and N more"

# The API's fields as this command's flags, for its errors (``reporting``'s flags).
JOB_FLAGS = {"job.gpu": "--gpu", "job.cwd": "--dir", "job.command": "COMMAND", "job.timeout_s": "--timeout",
             "job.stop_grace_s": "--grace", "job.priority": "--priority", "job.env": "--env", "job.node": "--node",
             "job.group": "--group", "job.after": "--after", "job.labels": "--label", "job.type": "--type",
             "job.gpu_model": "--gpu-model", "job.min_gpu_memory_mb": "--min-gpu-memory",
             "job.placement": "--placement", "job.retry": "--retry", "name": "--name", "trials": "--trials",
             "seed": "--seed", "max_parallel": "--max-parallel", "metric": "--metric", "goal": "--goal",
             "early_stop": "--early-stop", "early_stop.rule": "--early-stop", "early_stop.min_steps": "--min-steps",
             "early_stop.grace_s": "--early-stop-grace", "retry_on": "--retry-on", "retry_on.causes": "--retry-on",
             "retry_on.times": "--retry-on"}


class SweepError(ValueError):
    """A sweep the CLI refuses before sending it: ``flag`` names what the caller gave."""

    def __init__(self, flag: str, message: str) -> None:
        super().__init__(f"{flag}: {message}")
        self.flag = flag


# --- the submit's body -----------------------------------------------------------------


def wanted(flags: Mapping[str, Any]) -> bool:
    """Whether ``job submit`` was asked for a sweep."""
    return bool(flags.get("sweep") or flags.get("sweep_random") or flags.get("sweep_file"))


def _pair(text: str, flag: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not sep or not name or not value:
        raise SweepError(flag, f"{text!r} is not NAME=VALUES, e.g. {flag} lr=0.1,0.01")
    return name.strip(), value


def parse_grid(given: Sequence[str]) -> dict[str, list[Any]]:
    """``--sweep lr=0.1,0.01 --sweep opt=adam,sgd`` as the body's grid (values typed: 0.1 is a
    number, adam a string, true a boolean)."""
    from gpuplaned.protocol.sweep_values import parse_scalar  # only on a sweep's path

    grid: dict[str, list[Any]] = {}
    for text in given:
        name, values = _pair(text, "--sweep")
        if name in grid:
            raise SweepError("--sweep", f"{name} is given twice; give all its values at once: {name}=A,B,C")
        grid[name] = [parse_scalar(v.strip()) for v in values.split(",")]
    return grid


def parse_random(given: Sequence[str]) -> dict[str, str]:
    """``--sweep-random lr=log:1e-5:1e-1`` as the body's random (the daemon reads the distributions)."""
    found: dict[str, str] = {}
    for text in given:
        name, dist = _pair(text, "--sweep-random")
        if name in found:
            raise SweepError("--sweep-random", f"{name} is given twice")
        found[name] = dist.strip()
    return found


def parse_retry_on(text: str) -> dict[str, Any]:
    """``--retry-on oom,preempted,lost:3``: the causes, and the retries per trial (default 1)."""
    causes, _, times = text.partition(":")
    names = [c.strip().lower() for c in causes.split(",") if c.strip()]
    bad = [c for c in names if c not in RETRY_CAUSES]
    if not names or bad:
        raise SweepError("--retry-on", f"{', '.join(bad) or repr(text)}: the causes are {', '.join(RETRY_CAUSES)} "
                                       "(comma-separated), then :N for the retries, e.g. oom,lost:3")
    try:
        count = int(times) if times else 1
    except ValueError:
        raise SweepError("--retry-on", f"{times!r} after ':' is not a number of retries") from None
    return {"causes": [c.upper() for c in dict.fromkeys(names)], "times": count}


def load_sweep_file(path: Path) -> dict[str, Any]:
    """A sweep file's keys as the body's (its ``trials`` tables are the body's ``trials_list``)."""
    import tomllib  # only with --sweep-file

    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise SweepError("--sweep-file", f"cannot read {path}: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise SweepError("--sweep-file", f"{path} is not valid TOML: {exc}") from None
    unknown = sorted(set(data) - set(FILE_KEYS))
    if unknown:
        raise SweepError("--sweep-file", f"{path}: unknown key {unknown[0]!r} (known: {', '.join(FILE_KEYS)})")
    body = {k: v for k, v in data.items() if k not in ("random", "trials")}
    if "random" in data:
        random = dict(data["random"]) if isinstance(data["random"], dict) else data["random"]
        if isinstance(random, dict):
            for key in ("trials", "seed"):
                if key in random:
                    body[key] = random.pop(key)
        body["random"] = random
    if "trials" in data:
        if isinstance(data["trials"], int):
            body["trials"] = data["trials"]
        else:
            body["trials_list"] = data["trials"]
    kinds = [k for k in ("grid", "random", "trials_list") if k in body]
    if len(kinds) != 1:
        raise SweepError("--sweep-file", f"{path} must have exactly one of [grid], [random] or [[trials]]"
                                         + (f", not {' and '.join(kinds)}" if kinds else ""))
    return body


def sweep_body(job: dict[str, Any], flags: Mapping[str, Any]) -> dict[str, Any]:
    """The ``POST /api/v1/sweeps`` body: the job ``job submit`` built (its name is the sweep's),
    the parameters from the flags or the file, and the sweep's settings (flags win over the file)."""
    body: dict[str, Any] = load_sweep_file(flags["sweep_file"]) if flags.get("sweep_file") else {}
    if body and (flags.get("sweep") or flags.get("sweep_random")):
        raise SweepError("--sweep-file", "give the parameters in the file or as --sweep/--sweep-random, not both")
    if flags.get("sweep") and flags.get("sweep_random"):
        raise SweepError("--sweep", "a sweep is a grid (--sweep) or random (--sweep-random), not both")
    if flags.get("sweep"):
        body["grid"] = parse_grid(flags["sweep"])
    if flags.get("sweep_random"):
        body["random"] = parse_random(flags["sweep_random"])
    job = dict(job)
    name = job.pop("name", None)
    settings = {"name": name, "trials": flags.get("trials"), "seed": flags.get("seed"),
                "max_parallel": flags.get("max_parallel"), "metric": flags.get("metric"), "goal": flags.get("goal")}
    body.update({k: v for k, v in settings.items() if v is not None})
    if body.get("trials") is not None and "random" not in body:
        raise SweepError("--trials", "is the number of a random sweep's trials (--sweep-random); a grid or list "
                                     "has its own")
    if "random" in body and body.get("trials") is None:
        raise SweepError("--trials", "a random sweep (--sweep-random) needs its number of trials, e.g. --trials 20")
    if flags.get("early_stop"):
        body["early_stop"] = {"rule": flags["early_stop"]}
    for key, flag in (("min_steps", "--min-steps"), ("grace_s", "--early-stop-grace")):
        if flags.get(key) is not None:
            if "early_stop" not in body:
                raise SweepError(flag, "goes with --early-stop median|asha")
            body["early_stop"][key] = flags[key]
    if flags.get("retry_on"):
        body["retry_on"] = parse_retry_on(flags["retry_on"])
    body["job"] = job
    return body


def error_flags(body: Mapping[str, Any], file: Path | None) -> dict[str, str]:
    """The body's fields as what the caller typed, for the daemon's errors (``grid.lr`` is
    ``--sweep lr``, or the file's ``[grid] lr``)."""
    flags = dict(JOB_FLAGS)
    where = f"--sweep-file {file}" if file is not None else None
    for name in body.get("grid") or {}:
        flags[f"grid.{name}"] = f"{where} [grid] {name}" if where else f"--sweep {name}"
    for name in body.get("random") or {}:
        flags[f"random.{name}"] = f"{where} [random] {name}" if where else f"--sweep-random {name}"
    for index, _ in enumerate(body.get("trials_list") or ()):
        flags[f"trials_list[{index}]"] = f"{where} [[trials]] #{index + 1}"
    if where:
        flags.update(grid=f"{where} [grid]", random=f"{where} [random]", trials_list=f"{where} [[trials]]")
    else:
        flags.update(grid="--sweep", random="--sweep-random")
    return flags


def submit(g: Any, body: dict[str, Any], *, dry_run: bool, quiet: bool, json_output: bool,
           file: Path | None) -> None:
    """Send the sweep in one request and say what was made."""
    with reporting(g, json_output, error_flags(body, file)):
        reply = connect(g).post("/api/v1/sweeps", {**body, "dry_run": True} if dry_run else body)
    if json_output:
        render.print_json(reply)
        return
    sweep = reply["sweep"]
    if dry_run:
        _print_plan(body, reply)
        return
    if quiet:
        print(sweep["id"])
        return
    existed = f", {reply['existing']} existed already" if reply["existing"] else ""
    print(f"{sweep['id']} {sweep['name']}: {reply['created']} trial(s) queued{existed}")


def _print_plan(body: Mapping[str, Any], reply: Mapping[str, Any]) -> None:
    name = reply["sweep"]["name"] if reply["sweep"] else body.get("name") or "(named by the daemon)"
    cost = reply["worst_case_gpu_hours"]
    print(f"would make {reply['created']} trial(s) of sweep {name}"
          + (f" ({reply['existing']} exist already)" if reply["existing"] else "")
          + (f"; worst case {cost:g} GPU-hours" if cost is not None else "; no timeout: no worst case"))
    rows = [(str(t["trial"]) + (" (exists)" if t["exists"] else ""), _values(t["values"]),
             render.printable(" ".join(t["command"]))) for t in reply["planned"][:SHOWN_TRIALS]]
    if rows:
        print(render.table(("TRIAL", "VALUES", "COMMAND"), rows))
    if len(reply["planned"]) > SHOWN_TRIALS:
        print(f"... and {len(reply['planned']) - SHOWN_TRIALS} more")


def refuse(json_output: bool, exc: SweepError) -> None:
    fail(json_output, ErrorCode.BAD_REQUEST, str(exc), {"flag": exc.flag}, exit_code=EXIT_USAGE)


# --- the sweep noun --------------------------------------------------------------------


def _path(sweep_id: str, verb: str = "") -> str:
    return f"/api/v1/sweeps/{quote(sweep_id, safe='')}" + (f"/{verb}" if verb else "")


def _values(values: Mapping[str, Any]) -> str:
    return render.printable(" ".join(f"{k}={_show(v)}" for k, v in values.items()))


def _show(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _number(value: float | None) -> str:
    return "-" if value is None else f"{value:.6g}"


def progress(sweep: Mapping[str, Any]) -> str:
    c = sweep["counts"]
    ended = c["succeeded"] + c["failed"] + c["cancelled"]
    parts = [f"{ended}/{c['total']} ended", f"{c['running']} running", f"{c['queued']} queued",
             f"{c['succeeded']} succeeded", f"{c['failed']} failed", f"{c['cancelled']} cancelled"]
    return ", ".join(parts)


def best_line(sweep: Mapping[str, Any]) -> str:
    best = sweep.get("best")
    if sweep.get("metric") is None:
        return "best: no metric named (job submit --sweep ... --metric NAME)"
    if best is None:
        return f"best: no point of {sweep['metric']} yet"
    step = f" at step {best['step']}" if best.get("step") is not None else ""
    return (f"best: trial {best['trial']} ({_values(best['values'])}) {sweep['metric']} {_number(best['value'])}"
            f"{step} ({sweep['goal']}), {best['job_id']}")


@app.command("list")
def list_sweeps(
    ctx: typer.Context,
    status: Annotated[str | None, typer.Option("--status", metavar="STATE", show_default=False,
                                               help="Only sweeps in this state: QUEUED, RUNNING, PAUSED, SUCCEEDED, "
                                                    "FAILED, DONE or CANCELLED.")] = None,
    json_output: JsonOption = False,
) -> None:
    """List the sweeps, newest first, with their progress and best value so far."""
    g = globals_of(ctx)
    query = f"?status={quote(status.upper())}" if status else ""
    with reporting(g, json_output, {"status": "--status"}):
        found = connect(g).get(f"/api/v1/sweeps{query}")
    if json_output:
        render.print_json(found)
        return
    rows = [(s["id"], render.printable(s["name"]), s["status"], f"{s['counts']['succeeded']}/{s['counts']['total']}",
             str(s["counts"]["running"]), str(s["counts"]["queued"]),
             "-" if s["max_parallel"] is None else str(s["max_parallel"]),
             f"{_number(s['best']['value'])} (#{s['best']['trial']})" if s["best"] else "-")
            for s in found["sweeps"]]
    print(render.table(("SWEEP", "NAME", "STATUS", "DONE", "RUNNING", "QUEUED", "MAX", "BEST"), rows)
          if rows else "no sweeps")


@app.command("show")
def show(ctx: typer.Context, sweep_id: _SWEEP, json_output: JsonOption = False) -> None:
    """Show a sweep: its progress, each trial with its values, status and best value of the
    sweep's metric, and the best combination so far."""
    g = globals_of(ctx)
    with reporting(g, json_output):
        sweep = connect(g).get(_path(sweep_id))["sweep"]
    if json_output:
        render.print_json({"sweep": sweep})
        return
    paused = f", paused: {sweep['pause_reason']}" if sweep["paused"] else ""
    limit = f", max-parallel {sweep['max_parallel']}" if sweep["max_parallel"] is not None else ""
    print(f"sweep {sweep['id']} {render.printable(sweep['name'])} ({sweep['kind']}): {sweep['status']}{paused}{limit}")
    print(f"progress: {progress(sweep)}")
    if sweep.get("experiment"):
        print(f"experiment: {render.printable(sweep['experiment'])}")
    metric = sweep.get("metric") or "BEST"
    rows = [(str(t["trial"]), t["job_id"], t["status"], _values(t["values"]), _number(t["best"]),
             "-" if t["step_of_best"] is None else str(t["step_of_best"]),
             render.printable(t["queue_reason"] or t["failure_reason"] or ""))
            for t in sweep["trials"]]
    if rows:
        print(render.table(("TRIAL", "JOB", "STATUS", "VALUES", render.printable(metric).upper(), "STEP",
                            "WAIT/REASON"), rows))
    print(best_line(sweep))


def _act(ctx: typer.Context, sweep_id: str, verb: str, json_output: bool, done: str) -> None:
    g = globals_of(ctx)
    with reporting(g, json_output):
        sweep = connect(g).post(_path(sweep_id, verb))["sweep"]
    if json_output:
        render.print_json({"sweep": sweep})
    else:
        print(f"{sweep['id']} {render.printable(sweep['name'])}: {done}; {sweep['status']}, {progress(sweep)}")


@app.command("set")
def set_limit(
    ctx: typer.Context, sweep_id: _SWEEP,
    max_parallel: Annotated[int, typer.Option("--max-parallel", metavar="K", show_default=False,
                                              help="at most K trials run at once; 0: no limit")],
    json_output: JsonOption = False,
) -> None:
    """Change a running sweep's max-parallel: its queued trials follow it from the next pass, and
    a Slurm node applies it to the sweep's array jobs (scontrol update ArrayTaskThrottle=K)."""
    g = globals_of(ctx)
    if max_parallel < 0:
        fail(json_output, ErrorCode.BAD_REQUEST, f"--max-parallel must be 0 (no limit) or more, got "
             f"{max_parallel}", {"flag": "--max-parallel"}, exit_code=EXIT_USAGE)
    with reporting(g, json_output):
        sweep = connect(g).request("PATCH", _path(sweep_id), {"max_parallel": max_parallel or None})["sweep"]
    if json_output:
        render.print_json({"sweep": sweep})
    else:
        limit = sweep["max_parallel"] if sweep["max_parallel"] is not None else "no limit"
        print(f"{sweep['id']} {render.printable(sweep['name'])}: max-parallel {limit}; {sweep['status']}, "
              f"{progress(sweep)}")


@app.command("cancel")
def cancel(ctx: typer.Context, sweep_id: _SWEEP, json_output: JsonOption = False) -> None:
    """Cancel a sweep: its queued trials are cancelled, its running ones stopped (SIGTERM, then
    SIGKILL after their grace)."""
    _act(ctx, sweep_id, "cancel", json_output, "cancelled")


@app.command("pause")
def pause(ctx: typer.Context, sweep_id: _SWEEP, json_output: JsonOption = False) -> None:
    """Pause a sweep: none of its queued trials starts (they wait with "sweep NAME paused");
    its running trials go on."""
    _act(ctx, sweep_id, "pause", json_output, "paused")


@app.command("resume")
def resume(ctx: typer.Context, sweep_id: _SWEEP, json_output: JsonOption = False) -> None:
    """Resume a paused sweep: its queued trials may start again."""
    _act(ctx, sweep_id, "resume", json_output, "resumed")


@app.command("retry-failed")
def retry_failed(ctx: typer.Context, sweep_id: _SWEEP, json_output: JsonOption = False) -> None:
    """Queue a sweep's FAILED trials again (each a new attempt, started afresh)."""
    _act(ctx, sweep_id, "retry-failed", json_output, "failed trials queued again")
