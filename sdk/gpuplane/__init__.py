"""gpuplane: what training scripts import to report to GPUPlane.

Standard library only, Python 3.8+, and it never raises into or slows the training loop.
This distribution (``gpuplane-sdk``) installs into the training environment, apart from
the daemon's own.

::

    import gpuplane

    with gpuplane.init(project="mnist", config={"lr": 3e-4}) as run:
        for step in range(1000):
            run.log({"loss": loss, "lr": lr})       # step = previous step + 1
            if step % 500 == 0:
                torch.save(model.state_dict(), path)  # saving stays yours
                run.log_checkpoint(path)              # registered, never copied
        run.log_event("phase", {"name": "eval"})    # an event of your own, on the run's timeline
        run.log_evaluation({"accuracy": acc})       # under `gpuplanectl ckpt eval`: its metrics
        print(run.summary())                        # the daemon's view: latest/best per metric
    # or, without init: gpuplane.log({"loss": loss}) opens a run on first use

Where it reports (first found): ``GPUPLANE_SERVER`` + ``GPUPLANE_TOKEN`` (an ``sdk`` scope
token), ``GPUPLANE_ENDPOINT`` (set for dispatched jobs), else the daemon's port-file in
``GPUPLANE_RUNTIME_DIR`` / ``$XDG_RUNTIME_DIR/gpuplane`` / ``/tmp/gpuplane-<uid>``. With no
daemon, or when it dies mid-run, the run keeps working: its batches go to a local spool,
``$GPUPLANE_HOME/spool/sdk-<session>.jsonl`` (default home ``~/.local/share/gpuplane``; at
most ``GPUPLANE_SPOOL_MAX_BYTES``, 256 MiB by default, 0 for none, past which the oldest
points are dropped and counted), and the SDK looks for a daemon again every few seconds. The
run replays its spool itself when the daemon answers; what is left when the process ends is
replayed by the daemon when it starts, or by ``gpuplanectl sync``, exactly once.

The run joins ``run_id`` if given, else ``$GPUPLANE_RUN_ID`` (a dispatched job's run), else
the daemon makes a new run. At interpreter exit every open run is flushed (2 s at most in
all) and finished: SUCCEEDED, or FAILED (CANCELLED for KeyboardInterrupt) when an uncaught
exception ended the program. ``sys.exit(1)`` still counts as SUCCEEDED: use
``finish("FAILED")`` or the ``with`` form to say otherwise. After ``os.fork()`` the child's
runs are detached no-ops (the parent keeps reporting) until the child calls ``init`` again.
"""

from __future__ import annotations

import os
import threading
from typing import Any, List, Mapping, Optional

from gpuplane import _run
from gpuplane._run import Run

__version__ = "0.1.0"
__all__ = ["Run", "init", "log", "finish", "current_run", "__version__"]

_current = None  # type: Optional[Run]
_lock = threading.Lock()


def init(project: Optional[str] = None, experiment: Optional[str] = None, name: Optional[str] = None,
         config: Optional[Mapping[str, Any]] = None, run_id: Optional[str] = None,
         tags: Optional[List[str]] = None, max_steps: Optional[int] = None) -> Run:
    """Open a session on the daemon and return its ``Run``, which becomes the current run.

    Waits at most 2 s for the daemon to open the session (so ``run.id`` is known); returns at
    once when no daemon is published. An earlier run stays open until finished (or exit).
    ``max_steps``: how many steps the script will run, kept in the run's config as
    ``max_steps`` (the run's summary shows its progress and an ETA from it).
    """
    global _current
    if max_steps is not None:
        config = {**(config or {}), "max_steps": int(max_steps)}
    run = Run(project=project, experiment=experiment, name=name, config=config, run_id=run_id, tags=tags)
    _current = run
    return run


def log(data: Mapping[str, Any], step: Optional[int] = None) -> None:
    """``current_run().log(data, step)``, opening a run first if there is none. Never raises."""
    run = _current
    if run is None:
        run = _lazy_run()
        if run is None:
            return
    run.log(data, step)


def finish(status: str = "SUCCEEDED", timeout: float = 10.0) -> None:
    """Finish the current run (see ``Run.finish``); a later ``log`` opens a new one."""
    run = _current
    if run is not None:
        run.finish(status, timeout)


def current_run() -> Optional[Run]:
    return _current


def _lazy_run() -> Optional[Run]:
    global _current
    try:
        with _lock:
            if _current is None:
                _current = Run(wait=0)
            return _current
    except Exception:
        return None


def _forget(run: Run) -> None:
    global _current
    if _current is run:
        _current = None


def _after_fork_in_child() -> None:
    # _current stays (now a detached no-op) so that log() does not open a run in the child.
    global _lock
    _lock = threading.Lock()


_run._forget_callbacks.append(_forget)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
