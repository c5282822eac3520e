"""GPUPlane daemon core.

Importing this package must stay cheap: ``gpuplanectl`` imports ``gpuplaned.protocol``
through it, and the CLI's start-up time is a product feature. Nothing here imports trio.
"""

__version__ = "0.1.0"
