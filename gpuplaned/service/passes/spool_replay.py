"""The daemon's replay of SDK spool files: once, in the background, when it becomes READY.

A training process that could not reach the daemon left its batches in
``<home>/spool/sdk-<session>.jsonl`` (``gpuplaned.protocol.sdk_spool`` has the format, the
locking and the pure ``Replay``). At start the daemon replays every such file whose lock it
can take, through the same service calls as the HTTP routes: open the session (idempotent by
id), the environment, each batch (stored once per (session, seq)), the finish. A file still
locked belongs to a live process, which replays it itself; ``gpuplanectl sync`` replays on
demand what is left.

It runs after READY and never delays it; it stops between two steps once the daemon is
stopping (a file half done is simply replayed again later, which stores nothing twice), and
nothing it meets leaves this module: it logs and goes on.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

import trio

from gpuplaned.lifecycle import DaemonState
from gpuplaned.protocol.converter import structure, unstructure
from gpuplaned.protocol.errors import ApiError
from gpuplaned.protocol.sdk_spool import FileReport, Replay, Step, spool_files, take_claim
from gpuplaned.service.api import sessions

if TYPE_CHECKING:
    from gpuplaned.service.context import ServerContext

log = logging.getLogger("gpuplaned.spool")


def spool_dir(shared: ServerContext) -> Path:
    return shared.config.home / "spool"


async def replay_at_start(shared: ServerContext) -> None:
    """Replay what the spool dir holds; for ``nursery.start_soon`` right after READY. Never raises."""
    if shared.supervisor is None or shared.supervisor.ports.get("store") is None:
        return  # this role keeps no runs
    try:
        reports = await replay_dir(shared, spool_dir(shared))
    except Exception:
        log.exception("spool replay failed")
        return
    for report in reports:
        _log_report(report)


async def replay_dir(shared: ServerContext, directory: Path) -> list[FileReport]:
    files = await trio.to_thread.run_sync(spool_files, directory)
    reports = []
    for path in files:
        if shared.lifecycle.state is not DaemonState.READY:
            break
        reports.append(await replay_file(shared, path))
    return reports


async def replay_file(shared: ServerContext, path: Path) -> FileReport:
    """Replay one spool file (see ``sdk_spool.Replay`` for what each answer does)."""
    replay = Replay(path)
    claim = await trio.to_thread.run_sync(take_claim, replay)
    if claim is None:
        return replay.report
    try:
        while lines := await trio.to_thread.run_sync(claim.read):
            for step in replay.feed(lines):
                if shared.lifecycle.state is not DaemonState.READY:
                    replay.stopped(f"{path} line {step.line}: the daemon is stopping")
                    return replay.report
                try:
                    reply = await _apply(shared, step, replay.report.session_id or "")
                except ApiError as exc:
                    if not replay.refused(step, exc.code.http_status, exc.message):
                        return replay.report
                    continue
                except Exception as exc:  # the store went away under us (shutdown): next time
                    replay.stopped(f"{path} line {step.line}: {type(exc).__name__}: {exc}")
                    return replay.report
                replay.answered(step, reply)
        keep = replay.ended()
        kept = await trio.to_thread.run_sync(lambda: claim.done(keep=keep))
        replay.report.kept = str(kept) if kept else None
        return replay.report
    finally:
        claim.close()


async def _apply(shared: ServerContext, step: Step, session_id: str) -> Any:
    if step.kind == "open":
        return unstructure(await sessions.open_session(shared, structure(step.body, sessions.SessionCreate)))
    if step.kind == "env":
        return unstructure(await sessions.add_env(shared, session_id, step.body))
    if step.kind == "batch":
        return unstructure(await sessions.add_batch(shared, session_id, structure(step.body, sessions.BatchCreate)))
    return unstructure(await sessions.finish_session(shared, session_id, structure(step.body, sessions.SessionFinish)))


def _log_report(report: FileReport) -> None:
    for warning in report.warnings:
        log.warning("spool: %s", warning)
    if report.status == "replayed":
        log.info("spool: replayed %s into run %s: %d batch(es) (%d point(s)) stored, %d already there, "
                 "%d refused; %s", report.file, report.run_id, report.batches, report.points, report.duplicates,
                 report.rejected, f"finished {report.finished}" if report.finished else "not finished")
        if report.kept:
            log.warning("spool: %s had unreadable lines; kept as %s", report.file, report.kept)
    elif report.status == "busy":
        log.info("spool: %s belongs to a live process, which replays it itself", report.file)
    elif report.status in ("interrupted", "failed"):
        log.warning("spool: %s not replayed to its end (%s): %s", report.file, report.status, report.error)
