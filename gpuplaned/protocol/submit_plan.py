"""``SubmitPlan``: what a submit would do, answered by a dry run (``POST /api/v1/jobs?dry_run=true``)."""

from __future__ import annotations

import attrs

from gpuplaned.protocol.fields import doc

WOULD = ("dispatch", "queue", "refuse")


@attrs.frozen
class SubmitPlan:
    would: str = doc("dispatch: placed at once; queue: waits for a slot; refuse: a limit or a check says no",
                     enum=WOULD)
    node_id: str | None = doc("the node it would be placed on (dispatch only)")
    gpus: list[int] = doc("the GPU indexes it would get (dispatch only)")
    queue_position: int | None = doc("1 for the next to be placed (queue only)")
    budget_after_gpu_hours: float | None = doc("the token's GPU-hours left once this job's worst case is "
                                               "reserved; null: no budget")
    reasons: list[str] = doc("why it would be refused, or why it would wait")
