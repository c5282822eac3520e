"""A run's session: the in-loop ``log`` and the background sender that delivers its points.

``Run.log`` is the hot path. It stamps a step and a wall-clock ts, checks each value's type
and appends one ``(name, step, ts, value)`` tuple per point to a bounded
``collections.deque``: no lock beyond the deque's own atomic ``append``, no I/O, no
exception out. When the deque is full its oldest points fall out; the sender works out
how many from three counters (logged, taken, still queued), warns once, and reports the
running total as the metric ``gpuplane/dropped_points``.

A daemon thread drains the deque every ``FLUSH_INTERVAL`` s (sooner when ``FLUSH_POINTS``
points wait) into columnar batches of at most ``BATCH_POINTS`` points, each with the
session's next ``seq``. The session id is the SDK's own UUIDv7, so batches have their
(session, seq) before any daemon has answered, and the daemon stores one (session, seq)
once: a resend after a lost answer, or a replay of the spool, is harmless.

While the daemon answers, a batch is sent and kept in memory until it is acknowledged.
When no daemon is reachable, or a request fails (the daemon died mid-run), the unacknowledged
batch and then every batch made from the deque go to the local spool (``_spool``: one
``O_APPEND`` file per session, locked while this process lives, capped in size) instead, so
memory stays bounded for as long as the daemon is away. The daemon is tried again with
exponential backoff (at most ``MAX_BACKOFF`` s); once it answers, the thread re-opens the
session (idempotent), replays the spool from where it stopped, and goes back to sending
directly when it has caught up, cutting the file back to its header. At finish a fully
delivered spool is removed; one the daemon did not take is closed with a ``finish`` record,
for the daemon to replay when it starts or for ``gpuplanectl sync``. Spool I/O happens on
the sender thread only, and nothing raised in the thread escapes it.
"""

from __future__ import annotations

import array
import base64
import json
import logging
import numbers
import operator
import os
import reprlib
import socket
import sys
import threading
import time
import weakref
from collections import deque
from typing import Any, Dict, List, Mapping, Optional

from gpuplane import _endpoint, _env, _spool

logger = logging.getLogger("gpuplane")

MAX_QUEUE = 400_000  # points (~120 B each) held while the script outruns delivery; the oldest go first
FLUSH_INTERVAL = 0.5
FLUSH_POINTS = 5_000
BATCH_POINTS = 10_000  # ~400 KB of JSON, well inside the daemon's 1 MiB body limit
MAX_BACKOFF = 5.0
REQUEST_TIMEOUT = 10.0
MAX_NAME = 200  # the daemon's series-name limit
MAX_DEPTH = 8  # nested dicts deeper than this are skipped
DROPPED_METRIC = "gpuplane/dropped_points"
FINISH_STATES = ("SUCCEEDED", "FAILED", "CANCELLED")
MAX_RECORDS = 10_000  # script events and checkpoints held while the daemon is slow or away
BATCH_RECORDS = 1_000  # of each kind per batch (the daemon's limit)
MAX_RECORD_DATA = 16 * 1024  # an event's data or a checkpoint's metadata, as JSON
MAX_EVAL_METRICS = 1000  # in one log_evaluation call (the daemon's limit)
MAX_CONFIG_DEPTH = 32  # the daemon refuses JSON nested deeper than 64 levels; deeper config is shown as text
SEVERITIES = ("info", "warning", "critical")
SUMMARY_TIMEOUT = 5.0
SPOOL_RESERVE = 0.5  # s of a finish's wait kept for writing what is left to the spool

_time = time.time
_BIG_ENDIAN = sys.byteorder != "little"  # packed columns are little-endian on the wire
_live = weakref.WeakSet()  # type: weakref.WeakSet[Run]


class _NoDaemon(Exception):
    pass


class Run:
    """One SDK session reporting to a run. Make it with ``gpuplane.init``."""

    def __init__(self, *, project: Optional[str] = None, experiment: Optional[str] = None,
                 name: Optional[str] = None, config: Optional[Mapping[str, Any]] = None,
                 run_id: Optional[str] = None, tags: Optional[List[str]] = None,
                 max_queue: int = MAX_QUEUE, wait: float = 2.0,
                 env: Optional[Mapping[str, str]] = None) -> None:
        env = os.environ if env is None else env
        self._env = dict(env)
        # The hot path's state: touched by log() only (and read by the sender).
        self._queue = deque(maxlen=max(1, int(max_queue)))  # type: deque[Tuple[Any, int, int, Any]]
        self._append = self._queue.append
        # Script events and checkpoints: rare, so one small deque of ("events"|"checkpoints", record).
        self._records = deque(maxlen=MAX_RECORDS)  # type: deque[Tuple[str, Dict[str, Any]]]
        self._records_logged = 0
        self._step = -1
        self._closed = False  # log() is a no-op once finishing, finished or detached
        self._logged = 0  # points appended, counted after the append
        self._skipped = 0  # values that were not numbers (strings, None, ...) or bad calls
        self._errors = 0
        self._kicked = False
        self._wake = threading.Event()
        # Identity.
        self._run_id = run_id or env.get("GPUPLANE_RUN_ID") or None  # type: Optional[str]
        self._started_ms = int(_time() * 1000)  # the run began now, however late the daemon hears of it
        self._session_id = _uuid7()
        self._session_open = False  # the daemon has the session
        self._env_sent = False  # delivered, or written to the spool
        self._env_spool_tried = False
        self._body = _session_body(self._run_id, env, name, project, experiment, config, tags)
        # Sender state: touched by the sender thread only.
        self._client = None  # type: Optional[_endpoint.Client]
        self._pending = None  # type: Optional[Dict[str, Any]]
        self._seq = 0  # the next batch's
        self._taken = 0
        self._lost = 0  # points taken from the queue that could not be delivered nor spooled
        self._dropped = 0
        self._dropped_reported = 0
        self._late_skipped = 0
        self._sent_points = 0
        self._batches = 0
        self._rejected = 0
        self._reached = False  # a daemon has answered this run at least once
        self._offline = False  # the last try failed: batches go to the spool until one succeeds
        self._warned = set()  # type: set
        # The spool (sender thread only).
        self._spool_dir = _spool.spool_dir(env)
        limit, complaint = _spool.max_bytes(env)
        self._spool_limit = limit if _spool.available() else 0
        self._spool_complaint = complaint
        self._spool = None  # type: Optional[_spool.Spool]
        self._spool_failed = False
        self._backlog = False  # the spool holds batches the daemon has not acknowledged
        self._replay_at = 0  # where the spool's first unacknowledged record starts
        self._spooled_points = 0  # points in the spool not yet acknowledged
        self._spool_kept = None  # type: Optional[str]  # the file left for a later replay
        self._last_spill = 0.0
        self._reported = False
        # Finishing.
        self._finish_lock = threading.Lock()
        self._finish_status = None  # type: Optional[str]
        self._deadline = 0.0
        self._finished_sent = False
        self._detached = False
        self._opened = threading.Event()  # set once a session is open or the first try failed
        self._done = threading.Event()
        _install_hooks()
        _live.add(self)
        self._thread = threading.Thread(target=self._sender_main, name="gpuplane-sender", daemon=True)
        self._thread.start()
        if wait > 0:
            self._opened.wait(wait)

    # ---------------------------------------------------------------- public

    @property
    def id(self) -> Optional[str]:
        """The run's id: the one asked for, else the daemon's once the session is open (else None)."""
        return self._run_id

    @property
    def session_id(self) -> Optional[str]:
        """This session's id once the daemon has opened it, else None (it is in ``stats()`` anyway)."""
        return self._session_id if self._session_open else None

    @property
    def finished(self) -> bool:
        return self._closed

    def log(self, data: Mapping[str, Any], step: Optional[int] = None) -> None:
        """Queue one point per numeric value of ``data`` at ``step`` (default: previous step + 1).

        Never raises, never blocks. ints and floats (NaN and infinities included) are kept,
        bools become 0/1, other numbers (numpy scalars, ...) go through ``float()``, nested
        mappings are flattened with ``"/"`` (``{"a": {"b": 1}}`` is ``a/b``), and anything else
        (strings, None, lists, ...) is skipped and counted in ``stats()["skipped"]``. A step
        that is not a non-negative integer skips the whole call.
        """
        if self._closed:
            return
        try:
            if step is None:
                step = self._step + 1
            elif type(step) is not int or step < 0:
                step = _coerce_step(step)
                if step is None:
                    self._skipped += 1
                    return
            self._step = step
            ts = int(_time() * 1000)
            append = self._append
            n = 0
            for key, value in data.items():
                t = type(value)
                if t is float or t is int:
                    append((key, step, ts, value))
                    n += 1
                else:
                    n += self._log_other(key, value, step, ts, 0)
            self._logged += n
            if not self._kicked and len(self._queue) >= FLUSH_POINTS:
                self._kicked = True
                self._wake.set()
        except Exception:
            self._errors += 1

    def log_event(self, type: str, data: Optional[Mapping[str, Any]] = None, *, severity: str = "info",
                  step: Optional[int] = None) -> None:
        """Record an event of the script's own (``run.log_event("phase", {"name": "eval"})``).

        It shows in the run's events (type ``USER_EVENT``, message ``type``) at ``step``
        (default: the current step). ``severity`` is info, warning or critical. Never raises,
        never blocks; ``data`` must be JSON-able (at most 16 KB), else the event is skipped
        and counted in ``stats()["skipped"]``.
        """
        if self._closed:
            return
        try:
            if not isinstance(type, str) or not 0 < len(type) <= 200 or severity not in SEVERITIES:
                self._skipped += 1
                return
            record = {"name": type, "severity": severity, "step": self._record_step(step),
                      "ts": int(_time() * 1000)}  # type: Dict[str, Any]
            if data is not None:
                record["data"] = data
            self._records.append(("events", record))
            self._records_logged += 1
        except Exception:
            self._errors += 1

    def log_checkpoint(self, path: Any, step: Optional[int] = None, metadata: Optional[Mapping[str, Any]] = None,
                       *, epoch: Optional[float] = None) -> None:
        """Register a checkpoint the script saved at ``path`` (a file or a directory).

        Registers only: the file is never read, copied or written (its size is looked up on
        the sender thread). ``step`` defaults to the current step. Saving to the same path
        again (``last.pt``) moves that checkpoint to its new step. The run's checkpoints,
        with the best one by the primary metric marked, are in ``GET /api/v1/runs/{id}/checkpoints``
        and ``gpuplanectl ckpt list RUN``. Never raises, never blocks.
        """
        if self._closed:
            return
        try:
            record = {"path": os.path.abspath(os.fspath(path)), "step": self._record_step(step),
                      "ts": int(_time() * 1000)}  # type: Dict[str, Any]
            if metadata is not None:
                record["metadata"] = metadata
            if epoch is not None:
                record["epoch"] = epoch
            self._records.append(("checkpoints", record))
            self._records_logged += 1
        except Exception:
            self._skipped += 1

    def log_evaluation(self, metrics: Mapping[str, Any]) -> None:
        """Report the metrics of the evaluation this script runs as (``{"accuracy": 0.91}``).

        For a script run by ``gpuplanectl ckpt eval`` (an EVALUATE job): the metrics land on that
        evaluation, as the JSON object written to ``$GPUPLANE_EVAL_RESULT`` does, and several
        calls add up (a later value of a name wins). Nested mappings are flattened with ``"/"``;
        every value must be a finite number (bools and numpy scalars too), else the call is
        skipped and counted in ``stats()["skipped"]``. Never raises, never blocks.
        """
        if self._closed:
            return
        try:
            flat = {}  # type: Dict[str, float]
            if not _flat_numbers(metrics, "", flat, 0) or not 0 < len(flat) <= MAX_EVAL_METRICS:
                self._skipped += 1
                return
            self._records.append(("evaluations", {"metrics": flat, "ts": int(_time() * 1000)}))
            self._records_logged += 1
        except Exception:
            self._skipped += 1

    def summary(self, timeout: float = SUMMARY_TIMEOUT) -> Optional[Dict[str, Any]]:
        """The run's summary as the daemon has it (what it has received so far): per metric the
        latest and best point, progress, trend, warnings and the primary metric. None without a
        daemon or before the run is known. Blocks for at most ``timeout`` s; never raises."""
        run_id = self._run_id
        if run_id is None or self._detached:
            return None
        client = None
        try:
            endpoint = _endpoint.discover(self._env)
            if endpoint is None:
                return None
            client = _endpoint.Client(endpoint)
            answer = client.get("/api/v1/runs/%s/summary" % run_id, max(0.05, timeout))
            return answer.get("summary") if isinstance(answer, dict) else None
        except Exception:
            return None
        finally:
            if client is not None:
                client.close()

    def finish(self, status: str = "SUCCEEDED", timeout: float = 10.0) -> None:
        """Deliver what is queued (waiting at most ``timeout`` s) and finish the session.

        Later ``log`` calls are ignored. Without any daemon reachable it returns at once:
        the queued points and the finish status go to the spool, which the daemon replays when
        it starts (or ``gpuplanectl sync``), and a warning names the file. A daemon that
        answered earlier is waited for until ``timeout``, then the same happens. Calling it
        again does nothing.

        Raises:
            ValueError: ``status`` is not SUCCEEDED, FAILED or CANCELLED.
        """
        if status not in FINISH_STATES:
            raise ValueError("status must be one of %s, not %r" % (", ".join(FINISH_STATES), status))
        if self._begin_finish(status, timeout):
            self._end_finish(max(0.0, timeout) + 0.5)

    def stats(self) -> Dict[str, Any]:
        """Counters, for tests and curious users (approximate while the sender runs)."""
        spool = self._spool
        return {
            "logged": self._logged, "queued": len(self._queue), "dropped": self._dropped,
            "skipped": self._skipped + self._late_skipped, "errors": self._errors,
            "sent_points": self._sent_points, "batches": self._batches,
            "rejected_batches": self._rejected, "seq": self._seq, "session_id": self._session_id,
            "spooled": self._spooled_points, "spool": spool.path if spool is not None else self._spool_kept,
        }

    def __enter__(self) -> Run:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is None:
            status = "SUCCEEDED"
        elif issubclass(exc_type, KeyboardInterrupt):
            status = "CANCELLED"
        else:
            status = "FAILED"
        try:
            self.finish(status)
        except Exception:
            pass

    def __repr__(self) -> str:
        return "<gpuplane.Run id=%s session=%s>" % (self._run_id, self._session_id)

    # ---------------------------------------------------------------- hot path's slow side

    def _log_other(self, key: Any, value: Any, step: int, ts: int, depth: int) -> int:
        if type(value) is bool:
            self._append((key, step, ts, 1.0 if value else 0.0))
            return 1
        if value is None or isinstance(value, (str, bytes, bytearray)):
            self._skipped += 1
            return 0
        if isinstance(value, Mapping):
            if depth >= MAX_DEPTH:
                self._skipped += 1
                return 0
            prefix = key if type(key) is str else str(key)
            n = 0
            for k, v in value.items():
                name = prefix + "/" + (k if type(k) is str else str(k))
                t = type(v)
                if t is float or t is int:
                    self._append((name, step, ts, v))
                    n += 1
                else:
                    n += self._log_other(name, v, step, ts, depth + 1)
            return n
        if isinstance(value, numbers.Real) or hasattr(type(value), "__float__"):
            try:
                number = float(value)
            except Exception:
                self._skipped += 1
                return 0
            self._append((key, step, ts, number))
            return 1
        self._skipped += 1
        return 0

    def _record_step(self, step: Any) -> Optional[int]:
        if step is None:
            return self._step if self._step >= 0 else None
        return _coerce_step(step) if type(step) is not int or step < 0 else step

    # ---------------------------------------------------------------- finishing

    def _begin_finish(self, status: str, timeout: float) -> bool:
        with self._finish_lock:
            if self._detached or self._finish_status is not None:
                return False
            self._closed = True
            self._deadline = time.monotonic() + max(0.0, timeout)
            self._finish_status = status
        self._wake.set()
        return True

    def _end_finish(self, wait: float) -> None:
        if wait > 0:
            self._done.wait(wait)
        done = self._done.is_set()
        if not self._reported and done:
            self._reported = True
            kept = self._spool_kept
            left = len(self._queue) + _points_in(self._pending)
            if kept:
                logger.warning("gpuplane: run %s finished with %d point(s) undelivered (no daemon reached); they "
                               "wait in %s, which the daemon replays when it starts (or run `gpuplanectl sync`)",
                               self._run_id or "(unassigned)", self._spooled_points, kept)
            if left:
                logger.warning("gpuplane: run %s finished with %d point(s) undelivered (no daemon reached)",
                               self._run_id or "(unassigned)", left)
        if done:  # else the exit hook still waits for the sender (it may be writing the spool)
            _live.discard(self)
        _forget(self)

    def _detach(self) -> None:
        """In a forked child: stop everything without touching locks another thread may hold."""
        self._closed = True
        self._detached = True
        self._queue.clear()
        self._pending = None
        spool = self._spool
        if spool is not None:
            spool.close()  # the child's copy only: the parent keeps the file and its lock

    # ---------------------------------------------------------------- the sender thread

    def _sender_main(self) -> None:
        backoff = 0.0
        retry_at = 0.0  # monotonic: when to try the daemon again
        try:
            if self._spool_complaint:
                logger.warning(self._spool_complaint)
            while True:
                closing = self._finish_status is not None
                now = time.monotonic()
                if closing and now >= self._deadline:
                    self._give_up()
                    return
                self._account_drops()
                more = False
                if now >= retry_at:
                    try:
                        more = self._tick(closing)
                        backoff = 0.0
                        self._offline = False
                    except _NoDaemon:
                        backoff = min(max(0.2, backoff * 2), MAX_BACKOFF)
                        retry_at = self._go_offline(backoff)
                    except Exception as exc:  # transport trouble, a daemon not READY or gone, a bug
                        self._errors += 1
                        self._warn_once("send", "gpuplane: cannot reach the daemon yet (%s); will retry" % exc)
                        backoff = min(max(0.1, backoff * 2), MAX_BACKOFF)
                        retry_at = self._go_offline(backoff)
                    if self._offline and closing and not self._reached:
                        self._give_up()  # never found a daemon: do not hold up exit waiting for one
                        return
                else:
                    self._spill(due_only=True)
                if closing and self._finished_sent:
                    return
                if more:
                    continue
                wait = FLUSH_INTERVAL
                if self._offline:
                    wait = min(wait, max(0.0, retry_at - time.monotonic()))
                elif closing:
                    continue  # drain without pausing while finishing
                if closing:
                    wait = min(wait, max(0.0, self._deadline - time.monotonic()))
                self._wake.wait(wait)
                self._wake.clear()
                self._kicked = False
        except BaseException:
            pass  # never out of the thread
        finally:
            self._drop_client()
            spool = self._spool
            if spool is not None and not spool.closed:  # only if something above failed: keep what is there
                self._spool_kept = spool.path
                spool.close()
            self._opened.set()
            self._done.set()

    def _timeout(self) -> float:
        if self._finish_status is None:
            return REQUEST_TIMEOUT
        return max(0.05, min(REQUEST_TIMEOUT, self._deadline - time.monotonic()))

    def _drop_client(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def _post(self, path: str, body: Any) -> Any:
        if self._client is None:
            endpoint = _endpoint.discover(self._env)
            if endpoint is None:
                raise _NoDaemon()
            self._client = _endpoint.Client(endpoint)
        return self._client.post(path, body, self._timeout())

    def _tick(self, closing: bool) -> bool:
        """One step of delivery; True when there is more to do right away."""
        if not self._session_open:
            self._open_session()
        if not self._env_sent:
            self._send_env()
        if self._backlog:
            self._spill(due_only=True)  # the spool's order first: new batches queue up behind it
            self._replay_one()
            return True
        if self._pending is None:
            self._pending = self._build_batch()
        if self._pending is not None:
            self._send(self._pending)
            self._pending = None
            return True
        if closing and not self._finished_sent:
            try:
                self._post("/api/v1/sessions/%s/finish" % self._session_id, {"status": self._finish_status})
            except _endpoint.HttpError as exc:
                if exc.retryable:
                    raise
                self._warn_once("finish", "gpuplane: the daemon refused to finish the session: %s" % exc)
            self._finished_sent = True
            if self._spool is not None:
                self._spool.remove()  # everything in it was delivered
        return False

    def _open_body(self) -> Dict[str, Any]:
        body = dict(self._body)
        body["run_id"] = self._run_id
        body["session_id"] = self._session_id
        body["started_at"] = self._started_ms
        return body

    def _open_session(self) -> None:
        """Open the session, or re-open it after an outage (the daemon answers the same one)."""
        try:
            answer = self._post("/api/v1/sessions", self._open_body())
        except _endpoint.HttpError as exc:
            self._opened.set()
            if not exc.retryable:
                self._warn_once("open", "gpuplane: the daemon refused the session: %s" % exc)
            raise
        self._reached = True
        self._session_open = True
        self._run_id = str(answer["run_id"])
        self._opened.set()

    def _send_env(self) -> None:
        """The process's environment, once per session (gathered here, off the training thread)."""
        self._post_env(_env.snapshot())

    def _post_env(self, env: Any) -> None:
        try:
            self._post("/api/v1/sessions/%s/env" % self._session_id, env)
        except _endpoint.HttpError as exc:
            if exc.retryable:
                raise
            self._warn_once("env", "gpuplane: the daemon refused the environment snapshot: %s" % exc)
        self._env_sent = True

    def _send(self, batch: Dict[str, Any]) -> None:
        """Deliver one batch; returns once it is acknowledged or refused for good.

        Raises:
            HttpError (retryable, or 404: the daemon forgot the session), OSError...: try later.
        """
        try:
            answer = self._post("/api/v1/sessions/%s/batches" % self._session_id, _packed(batch))
        except _endpoint.HttpError as exc:
            if exc.retryable:
                raise
            if exc.status == 404:  # the daemon forgot the session: open it again, then resend
                self._session_open = False
                raise
            self._rejected += 1
            self._warn_once("reject", "gpuplane: the daemon rejected a batch of %d point(s): %s"
                            % (_points_in(batch), exc))
            return
        self._reached = True
        self._batches += 1
        if isinstance(answer, dict) and not answer.get("duplicate"):
            self._sent_points += _points_in(batch)

    # ---------------------------------------------------------------- the spool

    def _go_offline(self, backoff: float) -> float:
        """A try failed: spool what waits, and say when to try again."""
        self._offline = True
        self._opened.set()
        self._drop_client()
        self._spill()
        return time.monotonic() + backoff

    def _ensure_spool(self) -> Optional[_spool.Spool]:
        if self._spool is not None:
            return None if self._spool.closed else self._spool
        if self._spool_failed or self._spool_limit <= 0:
            return None
        try:
            self._spool = _spool.Spool.create(self._spool_dir, self._session_id, self._open_body(),
                                              self._spool_limit)
        except OSError as exc:
            self._spool_failed = True
            self._warn_once("spool", "gpuplane: cannot write the spool in %s (%s); undelivered points wait "
                            "in memory only" % (self._spool_dir, exc))
            return None
        self._replay_at = self._spool.header_end
        return self._spool

    def _spill(self, due_only: bool = False) -> None:
        """Move the unacknowledged batch and the queued points, as batches, to the spool.

        ``due_only``: only on the flush cadence (or when the deque fills up), so that the
        batches stay large. When the spool is full the rest stays in memory, where the deque
        drops the oldest points and counts them.
        """
        if due_only and not self._kicked and len(self._queue) < FLUSH_POINTS \
                and time.monotonic() - self._last_spill < FLUSH_INTERVAL:
            return
        self._last_spill = time.monotonic()
        spool = self._ensure_spool()
        if spool is None:
            return
        self._spool_env(spool)
        if self._pending is not None:
            if not self._to_spool(spool, self._pending):
                return
            self._pending = None
        while True:
            batch = self._build_batch()
            if batch is None:
                break
            if not self._to_spool(spool, batch):
                self._pending = batch
                return

    def _spool_env(self, spool: _spool.Spool) -> None:
        """The environment snapshot, tried once; if it does not fit it is sent when the daemon answers."""
        if not self._env_sent and not self._env_spool_tried:
            self._env_spool_tried = True
            try:
                self._env_sent = spool.append({"type": "env", "env": _env.snapshot()})
            except Exception:  # best effort, like the snapshot itself
                pass

    def _to_spool(self, spool: _spool.Spool, batch: Dict[str, Any]) -> bool:
        try:
            record = {"type": "batch"}  # type: Dict[str, Any]
            record.update(batch)
            written = spool.append(record)
        except OSError as exc:
            self._warn_once("spool_write", "gpuplane: cannot write to the spool %s (%s); newer points wait in "
                            "memory, where the oldest are dropped and counted as %s" % (spool.path, exc, DROPPED_METRIC))
            return False
        if not written:
            self._warn_once("spool_full", "gpuplane: the spool %s reached its cap of %d bytes "
                            "(GPUPLANE_SPOOL_MAX_BYTES); newer points wait in memory, where the oldest are "
                            "dropped and counted as %s" % (spool.path, spool.limit, DROPPED_METRIC))
            return False
        self._backlog = True
        self._spooled_points += _points_in(batch)
        return True

    def _replay_one(self) -> None:
        """Send the spool's next record; at its end, cut it back to the header and go direct."""
        spool = self._spool
        assert spool is not None
        record, after = spool.read_at(self._replay_at)
        if record is None:
            spool.rewind()
            self._replay_at = spool.header_end
            self._backlog = False
            self._spooled_points = 0
            return
        kind = record.get("type")
        if kind == "batch" and isinstance(record.get("metrics"), dict):
            batch = {"seq": record.get("seq"), "metrics": record["metrics"]}
            self._send(batch)
            self._spooled_points -= _points_in(batch)
        elif kind == "env":
            self._post_env(record.get("env"))
        self._replay_at = after

    def _give_up(self) -> None:
        """The finish's time is up (or no daemon was ever found): leave everything to a later replay."""
        self._drop_client()
        spool = self._ensure_spool()
        if spool is None:
            return  # no spool: _end_finish says how many points are lost
        try:
            self._spill()
            if self._pending is not None or self._queue:  # the spool is full: these are lost
                self._lost += _logged_points_in(self._pending)
                self._pending = None
                self._queue.clear()
                self._dropped_reported = 0  # the lost batch may have carried the last report
            if self._account_drops():  # one last small batch carries the dropped total
                self._dropped_reported = self._dropped
                spool.append_always({"type": "batch", "seq": self._seq, "metrics": {DROPPED_METRIC: {
                    "step": [max(0, self._step)], "ts": [int(_time() * 1000)], "value": [float(self._dropped)]}}})
                self._seq += 1
            spool.append_always({"type": "finish", "status": self._finish_status})
        except Exception as exc:
            self._warn_once("spool_write", "gpuplane: cannot write to the spool %s (%s)" % (spool.path, exc))
        self._spool_kept = spool.path
        spool.close()

    def _build_batch(self) -> Optional[Dict[str, Any]]:
        queue = self._queue
        popleft = queue.popleft
        metrics = {}  # type: Dict[str, Tuple[List[int], List[int], List[float]]]
        n = 0
        skipped = 0
        while n < BATCH_POINTS:
            try:
                name, step, ts, value = popleft()
            except IndexError:
                break
            n += 1
            if type(value) is not float:
                try:
                    value = float(value)
                except (OverflowError, TypeError, ValueError):
                    skipped += 1
                    continue
            cols = metrics.get(name)
            if cols is None:
                if type(name) is not str:
                    name = str(name)
                if not 0 < len(name) <= MAX_NAME:
                    skipped += 1
                    continue
                cols = metrics.get(name)
                if cols is None:
                    cols = metrics[name] = ([], [], [])
            cols[0].append(step)
            cols[1].append(ts)
            cols[2].append(value)
        self._taken += n
        self._late_skipped += skipped
        if self._account_drops():
            self._dropped_reported = self._dropped
            cols = metrics.setdefault(DROPPED_METRIC, ([], [], []))
            cols[0].append(max(0, self._step))
            cols[1].append(int(_time() * 1000))
            cols[2].append(float(self._dropped))
        records = self._take_records()
        if not metrics and not records:
            return None
        self._seq += 1
        batch = {"seq": self._seq - 1,
                 "metrics": {k: {"step": s, "ts": t, "value": v} for k, (s, t, v) in metrics.items()}}
        batch.update(records)
        return batch

    def _take_records(self) -> Dict[str, List[Dict[str, Any]]]:
        """Script events and checkpoints for the next batch, checked here, off the training thread."""
        out = {}  # type: Dict[str, List[Dict[str, Any]]]
        records = self._records
        while records and all(len(v) < BATCH_RECORDS for v in out.values()):
            kind, record = records.popleft()
            if _record_ok(kind, record):
                out.setdefault(kind, []).append(record)
            else:
                self._late_skipped += 1
        return out

    def _account_drops(self) -> bool:
        """Update the dropped total (a lower bound while log() runs); True when not yet reported."""
        queue = self._queue
        dropped = self._logged - self._taken - len(queue) + self._lost
        if dropped > self._dropped:
            self._dropped = dropped
            self._warn_once("dropped", "gpuplane: the queue of %d points was full, so the oldest points "
                            "were dropped; the running total is reported as %s" % (queue.maxlen, DROPPED_METRIC))
        return self._dropped > self._dropped_reported

    def _warn_once(self, what: str, message: str) -> None:
        if what not in self._warned:
            self._warned.add(what)
            logger.warning(message)


def _packed(batch: Dict[str, Any]) -> Dict[str, Any]:
    """The batch as sent: each column packed (little-endian int64 steps and timestamps,
    float64 values, base64), which costs this thread a few ns a point where JSON numbers
    cost about half a microsecond, all of it holding the GIL the training loop wants. The
    spool keeps JSON numbers (readable, and replayed rarely)."""
    metrics = {}
    for name, cols in batch["metrics"].items():
        metrics[name] = {"step": _b64("q", cols["step"]), "ts": _b64("q", cols["ts"]), "value": _b64("d", cols["value"])}
    packed = dict(batch)
    packed["metrics"] = metrics
    packed["encoding"] = "base64"
    return packed


def _b64(typecode: str, values: List[Any]) -> str:
    col = array.array(typecode, values)
    if _BIG_ENDIAN:
        col.byteswap()
    return base64.b64encode(col.tobytes()).decode("ascii")


def _points_in(batch: Optional[Dict[str, Any]]) -> int:
    if not batch:
        return 0
    return sum(len(cols["value"]) for cols in batch["metrics"].values())


def _logged_points_in(batch: Optional[Dict[str, Any]]) -> int:
    if not batch:
        return 0
    return sum(len(cols["value"]) for name, cols in batch["metrics"].items() if name != DROPPED_METRIC)


def _uuid7() -> str:
    """A UUIDv7 (RFC 9562): 48 bits of milliseconds, then random bits; what the daemon makes too."""
    ms = int(_time() * 1000)
    rand = int.from_bytes(os.urandom(10), "big")
    value = (ms & ((1 << 48) - 1)) << 80 | 0x7 << 76 | (rand >> 68 & 0xFFF) << 64 | 0b10 << 62 | rand & ((1 << 62) - 1)
    h = "%032x" % value
    return "%s-%s-%s-%s-%s" % (h[:8], h[8:12], h[12:16], h[16:20], h[20:])


def _record_ok(kind: str, record: Dict[str, Any]) -> bool:
    """Whether an event or checkpoint can go as it is; fills in a checkpoint's size."""
    extra = record.get("data" if kind == "events" else "metadata")
    if extra is not None:
        if not isinstance(extra, Mapping):
            return False
        try:
            text = json.dumps(extra, allow_nan=False)
        except (TypeError, ValueError, RecursionError):  # a cycle, or nested past what recursion allows
            return False
        if len(text) > MAX_RECORD_DATA:
            return False
        record["data" if kind == "events" else "metadata"] = json.loads(text)  # a plain copy, as sent
    if kind == "checkpoints":
        epoch = record.get("epoch")
        if epoch is not None:
            try:
                epoch = float(epoch)
            except Exception:
                return False
            if not (epoch >= 0 and epoch != float("inf")):
                return False
            record["epoch"] = epoch
        path = record["path"]
        if "\x00" in path or len(path) > 4096:
            return False
        try:
            info = os.stat(path)
            if not os.path.isdir(path):
                record["size_bytes"] = info.st_size
        except OSError:
            pass  # not there (yet, or any more): registered all the same
    return True


def _flat_numbers(data: Any, prefix: str, out: Dict[str, float], depth: int) -> bool:
    """``data``'s values as finite floats in ``out`` (nested mappings joined with "/");
    False at the first value that is no finite number, or a name the daemon refuses."""
    if not isinstance(data, Mapping) or depth >= MAX_DEPTH:
        return False
    for key, value in data.items():
        name = prefix + (key if type(key) is str else str(key))
        if isinstance(value, Mapping):
            if not _flat_numbers(value, name + "/", out, depth + 1):
                return False
            continue
        if isinstance(value, (str, bytes, bytearray)) or value is None:
            return False
        try:
            number = float(value)
        except Exception:
            return False
        if number != number or number in (float("inf"), float("-inf")) or not 0 < len(name) <= MAX_NAME \
                or "\x00" in name:
            return False
        out[name] = number
    return True


def _coerce_step(step: Any) -> Optional[int]:
    try:
        value = operator.index(step)
    except TypeError:
        try:
            number = float(step)
        except Exception:
            return None
        if not number.is_integer():
            return None
        value = int(number)
    return value if 0 <= value < 1 << 62 else None


def _text(value: Any, limit: int = 200) -> Optional[str]:
    if value is None:
        return None
    text = str(value)[:limit]
    return text or None


def _plain(value: Any, depth: int) -> Any:
    """``value`` as JSON-ready data, with what lies ``depth`` levels down (which the daemon would
    refuse the whole session over, or which recursion could not even walk) shown as short text."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if depth <= 0:
        return reprlib.repr(value)
    if isinstance(value, Mapping):
        return {str(key): _plain(item, depth - 1) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(item, depth - 1) for item in value]
    return repr(value)[:1000]


def _session_body(run_id: Optional[str], env: Mapping[str, str], name: Any, project: Any,
                  experiment: Any, config: Any, tags: Any) -> Dict[str, Any]:
    """The session's opening body, made JSON-safe now (later changes to ``config`` do not count)."""
    conf = None
    if config is not None:
        try:
            conf = _plain(dict(config), MAX_CONFIG_DEPTH)
        except Exception:
            conf = {"_unserializable": reprlib.repr(config)}
    tag_list = []  # type: List[str]
    if tags is not None:
        for tag in ([tags] if isinstance(tags, str) else list(tags))[:100]:
            text = _text(tag)
            if text:
                tag_list.append(text)
    rank = None
    for key in ("GPUPLANE_RANK", "RANK", "LOCAL_RANK"):
        raw = env.get(key, "")
        if raw.isdigit():
            rank = int(raw)
            break
    return {
        "run_id": run_id, "job_id": _text(env.get("GPUPLANE_JOB_ID"), 100), "name": _text(name),
        "project": _text(project), "experiment": _text(experiment), "config": conf, "tags": tag_list,
        "rank": rank, "host": _text(socket.gethostname()), "pid": os.getpid(),
        # A run this session creates takes checkpoint files only under it (the daemon checks).
        "cwd": _cwd(),
    }


def _cwd() -> Optional[str]:
    try:
        return os.getcwd()
    except OSError:  # the folder was removed under the script
        return None


# -------------------------------------------------------------------- process-wide hooks

_hooks_installed = False
_exit_status = "SUCCEEDED"
_forget_callbacks = []  # type: List[Any]
ATEXIT_BUDGET = 2.0


def _forget(run: Run) -> None:
    for callback in _forget_callbacks:
        try:
            callback(run)
        except Exception:
            pass


def _install_hooks() -> None:
    global _hooks_installed
    if _hooks_installed:
        return
    _hooks_installed = True
    import atexit
    import sys

    atexit.register(_at_exit)
    previous = sys.excepthook

    def excepthook(exc_type: Any, exc: Any, tb: Any) -> None:
        global _exit_status
        _exit_status = "CANCELLED" if issubclass(exc_type, KeyboardInterrupt) else "FAILED"
        previous(exc_type, exc, tb)

    sys.excepthook = excepthook


def _at_exit() -> None:
    """Finish every open run: SUCCEEDED, or FAILED/CANCELLED after an uncaught exception; 2 s in all.

    The senders give up on the daemon ``SPOOL_RESERVE`` s before that, to write what is left
    to the spool; a run finished earlier whose sender is still at it is waited for as well.
    """
    runs = [run for run in list(_live) if not run._detached]
    for run in runs:
        run._begin_finish(_exit_status, ATEXIT_BUDGET - SPOOL_RESERVE)
    deadline = time.monotonic() + ATEXIT_BUDGET
    for run in runs:
        try:
            run._done.wait(max(0.0, deadline - time.monotonic()))
            run._end_finish(0.0)
        except Exception:
            pass


def _after_fork_in_child() -> None:
    """A forked child inherits the runs but not their threads: detach them all (weakly held)."""
    for run in list(_live):
        run._detach()
    _live.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
