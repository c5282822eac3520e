"""A daemon's start loads what it runs and no more: a node that runs its own jobs and has no
webhook loads neither the Slurm package (~30 ms, its backend ~45 ms more) nor httpx (~85 ms),
and none loads numpy (~0.1 s) before a packed chunk, an event file or a big batch of loss
needs it."""

import json
import signal
import subprocess
import sys

WATCHED = ("httpx", "numpy", "gpuplaned.slurm", "gpuplaned.backends.slurm", "gpuplaned.actors.webhooks",
           "gpuplaned.actors.runner", "gpuplaned.service.api.webhooks")

# The daemon as `python -m gpuplaned` runs it, saying at its exit which of WATCHED it loaded.
PROBE = ("import atexit, json, sys\n"
         "atexit.register(lambda: print('LOADED ' + json.dumps(sorted(m for m in sys.modules "
         f"if m in {WATCHED!r})), file=sys.stderr, flush=True))\n"
         "from gpuplaned.cli import main\n"
         "sys.exit(main([]))\n")


def test_a_local_node_without_webhooks_loads_neither_httpx_nor_numpy_nor_the_slurm_backend(daemon_factory, tmp_path):
    daemon = daemon_factory()
    log_path = tmp_path / "probe.log"
    with open(log_path, "wb") as log:
        daemon.proc = subprocess.Popen([sys.executable, "-c", PROBE], env=daemon.env, stdout=log,
                                       stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    daemon.log_path = log_path
    daemon.wait_ready()
    daemon.signal(signal.SIGTERM)
    assert daemon.wait_exit() == 0, daemon.log()
    said = [line for line in daemon.log().splitlines() if line.startswith("LOADED ")]
    assert len(said) == 1, daemon.log()
    # The webhooks actor and the runner ran (a probe that loaded nothing would pass vacuously).
    assert json.loads(said[0].removeprefix("LOADED ")) == [
        "gpuplaned.actors.runner", "gpuplaned.actors.webhooks", "gpuplaned.service.api.webhooks"]
