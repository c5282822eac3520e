"""The daemon's side of job start-up: the launcher's client, the job files, other processes.

The runner owns one long-lived launcher process (``gpuplaned/shim/__main__.py --serve``,
see the ``gpuplaned.shim`` package docstring for its theory of operation) that runs each
job under a shim: one job at a time per shim, and a shim whose job has ended takes the
next. Jobs never depend on this side: a shim is in its own session, writes the job's output
straight to files and records the exit status in ``exit.json``, so the daemon (and the
launcher) may die and come back at any time.

- ``client``: ``open_launcher`` and ``Launcher``, which spawns, cancels and hears of each
  end while the launcher lives;
- ``job_files``: ``runtime.json``, ``exit.json`` (attrs records, read with the one
  converter and checked to be the attempt's) and the tail of a job's log, as read back
  from the job dir;
- ``processes``: processes that are not the daemon's children, named by pid plus start
  time: a job's shim, and what is left of a job whose shim died first;
- ``orphans``: whether such a job still runs, and following it to its end;
- ``environment``: the environment a job runs with.

Why a job failed, from what these tell, is ``gpuplaned.domain.failures``.
"""
