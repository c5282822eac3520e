"""The environment a job runs with: ``JobEnvironment``."""

from __future__ import annotations

import os
import pwd
from pathlib import Path

import attrs

from gpuplaned.protocol.agent import JobSpecWire

DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"  # for a job submitted without a PATH


@attrs.frozen
class JobEnvironment:
    """What every job's environment starts from and ends with; see ``for_job``.

    Nothing of the daemon's own environment reaches a job: a job runs with what it was
    submitted with (``gpuplanectl job submit`` sends the submitting shell's PATH, virtualenv
    and the few other variables its help lists), so it runs the same whichever shell or
    service manager started the daemon, a retry runs as the first attempt did, and the
    daemon's secrets stay its own.
    """

    defaults: dict[str, str]  # for what a submission leaves out: PATH, and who the job runs as
    fixed: dict[str, str]  # what GPUPlane sets the same for every job

    @classmethod
    def of(cls, runtime_dir: Path, home: Path, endpoint: str, fake_gpu_dir: Path | None = None) -> JobEnvironment:
        """For jobs of the daemon with ``runtime_dir``, ``home`` and the control ``endpoint``
        (``fake_gpu_dir``: where fake GPUs are claimed, so a test job can pose as a GPU process)."""
        user = pwd.getpwuid(os.getuid())
        defaults = {"PATH": DEFAULT_PATH, "HOME": user.pw_dir, "USER": user.pw_name}
        fixed = {
            "PYTHONUNBUFFERED": "1",
            "GPUPLANE_RUNTIME_DIR": str(runtime_dir),
            "GPUPLANE_ENDPOINT": endpoint,
            # The SDK's spool goes under the daemon's home, where the daemon replays it at start.
            "GPUPLANE_HOME": str(home),
        }
        if fake_gpu_dir is not None:
            fixed["GPUPLANE_FAKE_GPU_DIR"] = str(fake_gpu_dir)
        return cls(defaults, fixed)

    def for_job(self, spec: JobSpecWire) -> dict[str, str]:
        """The defaults, the job's own variables, then what GPUPlane sets."""
        return {
            **self.defaults, **spec.env, **self.fixed,
            # CPU-only jobs see no GPU at all rather than all of them.
            "CUDA_VISIBLE_DEVICES": ",".join(str(i) for i in spec.gpu_indexes),
            # The indexes are NVML's, which number GPUs by PCI bus; CUDA's own default order
            # (fastest first) can differ on a mixed machine and put the job on another GPU.
            "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
            "GPUPLANE_JOB_ID": spec.job_id,
            "GPUPLANE_RUN_ID": spec.run_id,
            "GPUPLANE_ATTEMPT": str(spec.attempt),
        }
