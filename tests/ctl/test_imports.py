"""The CLI process stays light: no daemon-side libraries get imported on its command paths."""

import json
import subprocess
import sys

HEAVY = ("trio", "quart", "quart_trio", "hypercorn", "pynvml", "mcp", "httpx", "cattrs", "werkzeug")

PROBE = f"""
import json, sys
from gpuplanectl.client import DaemonClient
from gpuplanectl.main import app
codes = {{}}
for args in (["--help"], ["status"], ["status", "--json"], ["stop", "nope"], ["daemon"], ["jobs"],
             ["submit", "--gpu", "0", "--", "true"], ["job", "show", "job_nope"], ["logs", "-f", "job_nope"],
             ["logs", "-f", "JOB"]):
    key = " ".join(args)
    if args[-1] == "JOB":  # the job submitted above, followed to its end
        args[-1] = DaemonClient.discover().get("/api/v1/jobs")["jobs"][0]["id"]
    try:
        app(args, prog_name="gpuplanectl")
    except SystemExit as exit:
        codes[key] = exit.code
heavy = sorted(m for m in sys.modules if m.split(".")[0] in {HEAVY!r})
print("PROBE " + json.dumps({{"codes": codes, "heavy": heavy}}))
"""


def test_cli_imports_no_heavy_libraries(daemon):
    result = subprocess.run([sys.executable, "-c", PROBE], env=daemon.env, capture_output=True,
                            text=True, timeout=30, stdin=subprocess.DEVNULL)
    assert result.returncode == 0, result.stderr
    probe = json.loads(result.stdout.splitlines()[-1].removeprefix("PROBE "))
    # Every path really ran against the daemon (a failure before the imports would pass vacuously).
    assert probe["codes"] == {
        "--help": 0, "status": 0, "status --json": 0, "stop nope": 1, "daemon": 0, "jobs": 0,
        "submit --gpu 0 -- true": 0, "job show job_nope": 1, "logs -f job_nope": 1, "logs -f JOB": 0,
    }
    assert probe["heavy"] == []
