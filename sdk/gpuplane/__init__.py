"""gpuplane: what training scripts import to report to GPUPlane.

Standard library only, Python 3.8+, and it never raises into or slows the training loop.
This distribution (``gpuplane-sdk``) installs into the training environment, apart from
the daemon's own.
"""

__version__ = "0.1.0"
