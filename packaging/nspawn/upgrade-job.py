"""The job packaging/nspawn/inside-upgrade.sh keeps running across a package upgrade.

Logs 50 points through the SDK, waits for the file ``go`` in its working dir (made once
the new package is in and the new daemon has adopted the job), logs 50 more and ends.
Writes its pid to ``pid``, its run id to ``run_id``, and ``phase1`` once the first points
are logged.
"""

import os
import time

import gpuplane

with open("pid", "w") as out:
    out.write(str(os.getpid()))
run = gpuplane.init(project="upgrade-check", name="upgrade")
with open("run_id", "w") as out:
    out.write(run.id or "")
for step in range(50):
    gpuplane.log({"train/loss": 1.0 / (step + 1)}, step=step)
print("logged steps 0-49 before the upgrade", flush=True)
open("phase1", "w").close()
while not os.path.exists("go"):
    time.sleep(0.1)
for step in range(50, 100):
    gpuplane.log({"train/loss": 1.0 / (step + 1)}, step=step)
print("logged steps 50-99 after the upgrade", flush=True)
gpuplane.finish()
print("finished", flush=True)
