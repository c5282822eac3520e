"""Telemetry sampling: GPU backends (nvml, fake, none), the host sampler, GPU-process
attribution and metric names.

A pure library: no trio, no actors. The monitor actor calls it from a worker thread every
period and owns the timing; everything here is one synchronous call per sample.
"""
