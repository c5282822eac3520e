"""Wire types and pure protocol helpers: attrs + cattrs + stdlib only, no trio, no I/O beyond files.

``gpuplanectl`` imports from here, so every module must stay import-light.
"""
