"""gpuplanectl: the thin command-line client of gpuplaned.

Import-light on purpose: no trio, quart, pynvml or mcp in this process.
"""
