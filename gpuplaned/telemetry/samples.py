"""What one sampling period sees: its time and the readings of each GPU and of the host.

The readings are wire types (``gpuplaned.protocol.node_samples``: the API shows them in a node's
snapshot), imported here so the monitor's modules keep one place to name them.
"""

from __future__ import annotations

from collections.abc import Mapping, Set

import attrs

from gpuplaned.protocol.node_samples import DiskSample as DiskSample
from gpuplaned.protocol.node_samples import EccErrors as EccErrors
from gpuplaned.protocol.node_samples import GpuProcess as GpuProcess
from gpuplaned.protocol.node_samples import GpuSample as GpuSample
from gpuplaned.protocol.node_samples import HostSample as HostSample

# What a GPU sample is taken against: GPU index -> how hard the job owning it works (0..1),
# or a plain set of busy indexes (1.0 each). Only the fake backend looks at it: real GPUs
# show what really runs on them.
Busy = Mapping[int, float] | Set[int]


def _errors_of(sample: NodeSample) -> tuple[str, ...]:
    return tuple(f"gpu{gpu.index}: {gpu.error}" for gpu in sample.gpus if gpu.error)


@attrs.frozen
class NodeSample:
    ts_ms: int  # wall clock, a data field only
    gpus: tuple[GpuSample, ...]
    host: HostSample | None
    backend: str  # "nvml", "fake" or "none"
    # One line per GPU that could not be read ("gpu3: gpu_lost: GPU is lost"); filled from
    # ``gpus`` unless given, so the monitor can set the node's status without a second look.
    gpu_errors: tuple[str, ...] = attrs.field(default=attrs.Factory(_errors_of, takes_self=True))
