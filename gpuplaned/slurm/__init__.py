"""GPUPlane's side of Slurm's client commands: the foundations of the Slurm runner backend.

A node library (it runs on the node that submits, beside the runner): it calls Slurm's CLI,
never libslurm or slurmrestd, and keeps to the text formats every release since 22.05 prints
alike (docs/slurm.md).

- ``commands``: ``SlurmCli`` runs each client under a timeout with a scrubbed environment,
  at configurable paths; ``SlurmUnreachable`` and the other typed failures; ``Capabilities``
  of a release;
- ``parsing``: pure parsers of squeue, scontrol show job, sacct and sbatch output;
- ``submission``: ``submit`` an attempt as ``gp-<job id>-<attempt>``, looking the name up
  before ever submitting again;
- ``polling``: one squeue per cycle for a set of jobs, ``Backoff``, and ``read_ends``;
- ``batch_job``: the attempt's ``spec.json`` and the command a batch script execs (the one-shot shim);
- ``cancelling``: ``cancel`` through scancel;
- ``arrays``: a sweep's trials as one array job (``submit_array``, ``set_throttle``, task ids ``A_i``).

The runner's Slurm backend (``gpuplaned.backends.slurm``) drives these; docs/slurm.md says
how, and what is still to come.
"""

from gpuplaned.slurm.cancelling import cancel as cancel
from gpuplaned.slurm.commands import AccountingDisabled as AccountingDisabled
from gpuplaned.slurm.commands import Capabilities as Capabilities
from gpuplaned.slurm.commands import SlurmCli as SlurmCli
from gpuplaned.slurm.commands import SlurmCommandFailed as SlurmCommandFailed
from gpuplaned.slurm.commands import SlurmError as SlurmError
from gpuplaned.slurm.commands import SlurmNotInstalled as SlurmNotInstalled
from gpuplaned.slurm.commands import SlurmPaths as SlurmPaths
from gpuplaned.slurm.commands import SlurmUnreachable as SlurmUnreachable
from gpuplaned.slurm.polling import Backoff as Backoff
from gpuplaned.slurm.polling import JobEnd as JobEnd
from gpuplaned.slurm.polling import poll as poll
from gpuplaned.slurm.polling import read_ends as read_ends
from gpuplaned.slurm.submission import SubmitRefused as SubmitRefused
from gpuplaned.slurm.submission import SubmitSpec as SubmitSpec
from gpuplaned.slurm.submission import Submitted as Submitted
from gpuplaned.slurm.submission import SubmitUncertain as SubmitUncertain
from gpuplaned.slurm.submission import submit as submit
