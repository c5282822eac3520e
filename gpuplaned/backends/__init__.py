"""Runner backends: how a node runs the attempts the runner drives.

The runner (``gpuplaned.actors.runner``) drives every attempt through one interface,
``RunnerBackend``: start, watch, cancel, adopt after a restart, read the end, each keyed by
the backend's own opaque handle of the attempt. What each step means is the attempt machine's
(``gpuplaned.domain.attempts``); what it takes is the backend's.

- ``base``: the interface and what crosses it (``Started``, ``Running``);
- ``local``: the launcher and its per-job shims on this machine (a pid is the handle); the
  node offers per-GPU slots;
- ``slurm``: ``sbatch`` with our shim one-shot inside the allocation (a Slurm
  job id is the handle); the node offers pooled capacity and Slurm places the GPUs.

``[node] runner = "local" | "slurm"`` picks one (``gpuplaned.config``).
"""
