"""The replies about checkpoints: a run's list, the best of an experiment, a verify, a prune."""

from __future__ import annotations

from typing import Any

import attrs

from gpuplaned.protocol.fields import doc
from gpuplaned.protocol.reply_words import MS, listed

MAX_LISTED_METRICS = 8  # of each checkpoint in a run's list: a listing, not the run's whole summary


@attrs.frozen(kw_only=True)
class CheckpointMetric:
    name: str
    value: float | None = doc("null: NaN or infinite")
    step: int = doc("the step of the point taken: the nearest to the checkpoint's (a tie: the one before)")


@attrs.frozen(kw_only=True)
class CheckpointEvaluation:
    id: str
    job_id: str | None = doc("the EVALUATE job; null: logged by the script (run.log_evaluation)")
    status: str
    suite: str | None
    dataset: str | None
    metrics: dict[str, float | None]
    created_at: int = doc(MS)


@attrs.frozen(kw_only=True)
class Checkpoint:
    """A checkpoint a training script registered (run.log_checkpoint), or the node found in the
    job's folders (metadata.source "watcher")."""

    id: str = doc("ck_<ULID>")
    run_id: str
    step: int | None = doc(minimum=0)
    epoch: float | None = doc(minimum=0)
    path: str = doc("where the script saved it (registered, never copied)")
    size_bytes: int | None = doc(minimum=0)
    metadata: dict[str, Any]
    created_at: int = doc("when it was registered (a re-registered path moves to its new step)")
    fingerprint: str | None = doc("sha1:<hex> of its size, mtime and first and last MiB, when the node found it")
    full_hash: str | None = doc("sha256:<hex> of every byte, kept by the first verify that found it unchanged")
    verified_at: int | None = doc("when that verify was")
    parent_id: str | None = doc("the resume chain: the run's checkpoint before it by step, or for the run's first "
                                "the checkpoint the run resumed from")
    deleted_at: int | None = doc("when retention deleted its file (the row stays for the lineage); null: not deleted")
    metric_value: float | None = listed("in a run's list: the ranking metric's last value at or before the step "
                                        "(null: none, NaN or infinite)")
    best: bool = listed("in a run's list: the best checkpoint by the metric's direction (never NaN, never deleted)")
    metrics: list[CheckpointMetric] = listed(f"in a run's list: the run's metrics nearest its step, the ranking "
                                             f"metric first, at most {MAX_LISTED_METRICS}")
    evaluations: list[CheckpointEvaluation] = listed("in a run's list: its evaluations, newest first")


@attrs.frozen(kw_only=True)
class CheckpointList:
    checkpoints: list[Checkpoint]
    metric: str | None = doc("the metric the checkpoints are ranked by")
    direction: str | None = doc("minimize, maximize or none")
    best_id: str | None


@attrs.frozen(kw_only=True)
class CheckpointReply:
    checkpoint: Checkpoint


@attrs.frozen(kw_only=True)
class SkippedCheckpoint:
    checkpoint_id: str
    reason: str = doc("gone, a size other than the registered one, or changed since it was found")


@attrs.frozen(kw_only=True)
class BestCheckpoint:
    """The best checkpoint over an experiment's runs whose file is still what was registered."""

    checkpoint: Checkpoint
    run_id: str
    experiment_id: str
    metric: str = doc("the metric it is ranked by")
    direction: str = doc(enum=["minimize", "maximize"])
    metric_value: float = doc("the metric's last value at or before its step (never NaN or infinite)")
    skipped: list[SkippedCheckpoint] = doc("better-ranked checkpoints passed over because their file is gone or "
                                           "changed, best first")


@attrs.frozen(kw_only=True)
class CheckpointVerify:
    """A checkpoint's file as it is now, against what was registered."""

    checkpoint: Checkpoint
    present: bool = doc("whether the file (or directory) is still there and readable")
    changed: bool | None = doc("true: gone, or its fingerprint or full hash differs from the one kept; "
                               "null: nothing to compare with (registered by the script, never verified)")
    size_bytes: int | None = doc("its size now", minimum=0)
    fingerprint: str | None = doc("its fingerprint now")
    full_hash: str | None = doc("sha256:<hex> of every byte now")
    error: str | None = doc("why it could not be read, when it is there but unreadable")


@attrs.frozen(kw_only=True)
class PrunedCheckpoint:
    checkpoint_id: str
    path: str
    step: int | None
    size_bytes: int | None


@attrs.frozen(kw_only=True)
class KeptCheckpoint(PrunedCheckpoint):
    reasons: list[str] = doc("every reason it stays: best, best K, last K, in use: ..., not GPUPlane's to delete: "
                             "..., no step...")


@attrs.frozen(kw_only=True)
class DeletedCheckpoint(PrunedCheckpoint):
    already_gone: bool = doc("its file was gone before this prune (marked deleted all the same)")


@attrs.frozen(kw_only=True)
class RefusedCheckpoint(PrunedCheckpoint):
    reason: str = doc("why its file was left: changed since it was registered, a symbolic link, nothing to check it "
                      "against, unreadable")


@attrs.frozen(kw_only=True)
class PruneResult:
    """What a prune kept and why, what it deleted (a dry run: would delete), and what it refused."""

    run_id: str
    dry_run: bool
    keep_best: int
    keep_last: int
    metric: str | None = doc("the ranking metric: the run's primary metric")
    direction: str | None = doc("minimize, maximize or none")
    kept: list[KeptCheckpoint]
    deleted: list[DeletedCheckpoint] = doc("its file is gone and its row marked deleted, with a CHECKPOINT_DELETED "
                                           "event; a dry run: what would be deleted")
    refused: list[RefusedCheckpoint] = doc("the rule would delete it, but its file is not what was registered")


def checkpoint_of(row: Any, **listed_fields: Any) -> Checkpoint:
    """The reply for a store's checkpoint row (a class with ``Checkpoint``'s first fields), with
    what a run's list adds (``metric_value``, ``best``, ``metrics``, ``evaluations``)."""
    return Checkpoint(**attrs.asdict(row, recurse=False), **listed_fields)


def pruned(row: Any) -> dict[str, Any]:
    """A prune's words for a checkpoint row: the fields ``PrunedCheckpoint`` and its kinds share."""
    return {"checkpoint_id": row.id, "path": row.path, "step": row.step, "size_bytes": row.size_bytes}
