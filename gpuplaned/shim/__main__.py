"""The launcher program: ``python -I -S /abs/path/gpuplaned/shim/__main__.py --serve [...]``;
with ``--oneshot ATTEMPT_DIR`` instead, the one-shot shim a Slurm batch job runs (``oneshot``).

Run by its path, this file loads its own folder as the package ``gpuplaned.shim``, without
``gpuplaned`` (neither wanted nor importable under ``-I -S``), then runs ``serve.main``:
see "Run by path" in the package docstring. ``python -m gpuplaned.shim`` runs the same.
"""

import sys

if not __package__:  # run by path (this file, or its folder), not imported as a module
    import importlib.util
    import os

    _here = os.path.dirname(os.path.realpath(__file__))
    _spec = importlib.util.spec_from_file_location(
        "gpuplaned.shim", os.path.join(_here, "__init__.py"), submodule_search_locations=[_here])
    assert _spec is not None and _spec.loader is not None
    _package = importlib.util.module_from_spec(_spec)
    sys.modules[_spec.name] = _package
    _spec.loader.exec_module(_package)

from gpuplaned.shim.serve import main  # noqa: E402  (the package is loaded by now)

if __name__ == "__main__":
    sys.exit(main())
