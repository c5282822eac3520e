"""The job launcher ("zygote") and the per-job shim: standard library only, run by path.

The runner starts ``python -I -S /abs/path/gpuplaned/shim/__main__.py --serve`` once. That
process, the **launcher**, reads newline-delimited JSON requests on stdin and answers each
with one JSON line on stdout:

    {"op": "spawn", "id": ..., "job_dir": "/abs", "argv": [...], "cwd": "/abs", "env": {...},
     "timeout_s": float | null, "grace_s": float, "job_id": str | null, "attempt": int | null,
     "seq": int}
      -> {"id": ..., "ok": true, "shim_pid", "shim_start_time", "pid", "pgid", "start_time",
          "started_at", "seq"}
      -> {"id": ..., "ok": false, "error": "argv[0] 'nosuch' not found: ...", "seq"}
    {"op": "ping", "seq": int} -> {"ok": true, "pong": true, "seq"}
    {"op": "cancel", "id": ..., "seq": int} -> {"id": ..., "ok": true, "cancelled": bool, "seq"}
    {"op": "orphan", "id": ..., "seq": int} -> {"id": ..., "ok": true, "exit": {...} | null, "seq"}

and, unasked, once a job it started has ended (after ``exit.json`` is written):

    {"event": "exit", "id": ..., "exit": {what exit.json holds} | null}

``exit`` is null when the shim ended without saying (it was killed): ``exit.json`` is
then the only record, if there is one, and the job itself may still be running (see
"Orphaned jobs" below; ``orphan`` asks how it ended, once nothing of it is left). A
launcher that is restarted does not know the jobs of the one before; the daemon watches
those through their shims' pids.

Requests are **pipelined**: the launcher hands a spawn to a shim and goes straight on to
the next request, so replies come back in the order the shims finish, not the order of the
requests. ``seq`` (optional, any JSON value) is echoed in the reply to tell them apart; a
reply without one (a request that was not valid JSON) cannot be matched to anything.
``job_id`` and ``attempt`` (optional) name the attempt: ``runtime.json`` and ``exit.json``
(and so the exit event) then carry them, and the daemon checks them when it reads one back.
``started_at`` is the wall clock just before ``posix_spawn``, the same value as in
``runtime.json``.

On EOF it answers what is still in flight, then exits; the jobs it started keep running.

Modules
-------
- ``records``: what the launcher, the shim and the daemon share: the job files' names, the
  spawn request (``Spec``), and the ``runtime.json``/``exit.json`` records and writers;
- ``procs``: process and fd primitives of both programs (``/proc``, signals, pipes, libc);
- ``serve``: the launcher loop, and ``main``, its command line;
- ``forked``: what the launcher holds of the processes it forks;
- ``job``: the per-job shim, which runs in a forked copy of the launcher;
- ``oneshot``: the same shim run as a program of its own, one job, for a Slurm batch job
  (``--oneshot ATTEMPT_DIR``; its docstring has what differs);
- ``__main__``: the file the runner starts.

Run by path, importing only the standard library
------------------------------------------------
``-I -S`` keeps the daemon's environment out of the launcher, and so out of every shim
forked from it: no site-packages, no ``PYTHON*`` variables, no user site, and not the
script's folder on ``sys.path``. Neither ``gpuplaned`` (its ``__init__`` and whatever that
pulls in) nor any other package is importable there, nor wanted: each module here imports
only the standard library, and its siblings relatively (``from .records import ...``).

``__main__.py``, run by its path, therefore loads its own folder as the package
``gpuplaned.shim`` (``importlib.util.spec_from_file_location`` with the folder as the
package's search location) and registers it in ``sys.modules`` before it imports
``gpuplaned.shim.serve``. The import system then finds the submodules in that folder and,
their parent package being loaded already, never looks for ``gpuplaned``. Nothing depends
on ``sys.path`` or on where the folder is (the checkout in an editable install,
site-packages in a normal one), the modules have the same names in the launcher as in the
daemon, which imports them the ordinary way, and ``python -m gpuplaned.shim`` or running
the folder works as well. (Bare sibling imports, ``import records`` from a script, would
rest on ``sys.path[0]``, which ``-I`` leaves out for a file, and would give the modules
other names than the daemon's.) This ``__init__`` holds no code: the launcher runs it too.

Theory of operation
-------------------
Starting an interpreter costs ~35 ms, so the launcher ``fork()``s a **shim** per job instead
(single-threaded, so the fork is safe; the shim never returns into the launcher's code and
leaves through ``os._exit``). Shims are forked *ahead* of their request (``prefork`` of them
wait idle, blocked on a pipe of their own), so a request only costs the launcher a pipe
write: the fork and the shim's setup below are off the critical path. The shim:

1. ``setsid()``: its own session, so signals aimed at the daemon's group or terminal miss it;
   becomes a child subreaper, so descendants that lose their parent (including ones that
   ``setsid()`` out of the job's group) are re-parented to it and stay within reach;
   ignores SIGINT/SIGHUP/SIGPIPE and keeps SIGTERM/SIGCHLD blocked, taking them one at a
   time from ``sigtimedwait`` (no handlers, no races with ``waitpid``); closes every fd but
   its two pipes and ``/dev/null``. Then it waits for its request (EOF: exit quietly).
2. Creates the job dir (0700; what exists is left as it is), removes ``runtime.json``/
   ``exit.json`` left there by an earlier spawn, opens ``stdout.log``/``stderr.log`` (append,
   0600), enters the job's cwd and starts the job's **main process** with ``posix_spawn``:
   own process group, stdin ``/dev/null``, stdout/stderr straight into the files (no pipe
   the daemon could break), default signal dispositions, an empty mask, no other fds,
   argv[0] looked up on the job env's PATH. A failed exec comes back as an errno (see
   ``job._start_child``).
3. Writes ``runtime.json`` (temp file, rename) and reports to the launcher, which replies.
   Durability is deferred: once the job has run ``job.DURABLE_AFTER_S`` the shim fsyncs
   ``runtime.json``, the job dir and any parent it created, and then writes ``exit.json``
   with an fsync too. A job that ends sooner (a trivial one) gets no fsync at all, which
   keeps two to four journal commits (~0.3 ms each, more on a busy disk) off the path from
   one queued job to the next. Nothing is lost when a process dies: the page cache holds
   the records. Only a power cut within the first half second of a job can lose them, and
   the store's own commits (``synchronous=NORMAL``) are not fsynced either: a lost
   ``runtime.json`` reads as "never started" (back to the queue), a lost or torn
   ``exit.json`` as LOST.
4. Waits. SIGTERM (cancel) or ``timeout_s`` sends SIGTERM (and SIGCONT) to the group and to
   re-parented descendants, then SIGKILL after ``grace_s``; a second SIGTERM kills at once.
5. When the main process has exited it is left a zombie, so its pid (the group id) cannot
   be reused, while the group and every other descendant is SIGKILLed and reaped; only
   then is it reaped itself and ``exit.json`` written (temp file, rename; fsynced as step 3
   says). The same record goes down the report pipe, which the shim kept open, and the
   launcher passes it on as an ``exit`` event. The shim exits 0.

A spawn that fails (no such command, missing cwd, permission denied, a job dir that cannot
be created) gets an ``ok: false`` reply and an ``exit.json`` with reason ``spawn_failed``,
exit code 127 (not found) or 126. Its shim started nothing and takes the next request: no
request, however bad, ends a shim (what exec cannot take, such as a NUL byte, is refused
before any shim sees it).

Orphaned jobs: a shim can die before its job (``kill -9``, a bug). The launcher is a child
subreaper, so the job's processes are then re-parented to it rather than to init, and it
reaps its children as it goes (shims, helpers, such jobs; once per turn of its loop, so a
child that ends while the launcher is idle stays a zombie until the next request). The
exit status of such a job's main process, which no shim is left to write to ``exit.json``,
is kept until an ``orphan`` request takes it. The daemon follows such a job by its
processes (``runtime.json``) until none is left, and holds its GPUs meanwhile. Shims,
which are the launcher's children too, are not affected: they outlive the launcher as
before, and a job whose shim dies after the launcher has gone goes to init, its exit
status unknown.

A shim that has not reported ``report_timeout_s`` (default 30 s) after it got its request
is stopped, its job's process group (if it got as far as starting one) and then the shim
itself are SIGKILLed, and the reply is ``ok: false`` ("... did not report within ..."). A
shim that exits without reporting gets ``ok: false`` too. In both cases the reply waits for
a short-lived helper process to write ``exit.json`` (``spawn_failed``), so the launcher
itself never touches a job dir on a possibly hung file system.
"""
