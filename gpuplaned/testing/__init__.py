"""Fakes and fault injection that ship with the package, for tests and demos.

- ``launcher``: ``FakeLauncher``, the launcher's interface with scripted jobs in trio time;
- ``node_link``: ``MemoryNodeLink``, the server's half of the node link, in memory;
- ``runner``: ``MemoryRunner``, the runner's handle as the node's readers see it, in memory;
- ``actors``: fault-injection actors (``GPUPLANE_TESTING_ACTORS``).
"""
