"""Batch submit on the wire (``POST /api/v1/jobs:batch``): the body, a list of ``JobSubmit``,
and the reply, the jobs queued in the body's order.

The entries are kept as raw JSON here and structured one by one by the service
(``gpuplaned.service.api.batches``), so a refusal names every bad entry by its index, not
only the first one the converter meets.
"""

from __future__ import annotations

from typing import Any

import attrs

from gpuplaned.protocol.fields import doc, field
from gpuplaned.protocol.job_wire import Job, JobSubmit

# A 1,000-trial sweep is the case to serve; 10,000 bounds one transaction's work (and the
# reply's size). The 1 MiB body limit holds ~5,000 typical entries (~200 bytes each).
MAX_BATCH_JOBS = 10_000


@attrs.frozen(kw_only=True)
class BatchSubmit:
    """Jobs to queue together: all of them, or none."""

    jobs: list[Any] = field(min_items=1, max_items=MAX_BATCH_JOBS, documented_as=list[JobSubmit],
                            description=f"1 to {MAX_BATCH_JOBS} jobs, each as POST /api/v1/jobs takes it; `after` "
                                        "may name only jobs that exist already, not another entry of the batch",
                            message=f"must be a list of 1 to {MAX_BATCH_JOBS} jobs")


@attrs.frozen(kw_only=True)
class BatchRefusal:
    """One refused entry of a batch: the refusal's ``details.refused`` holds one per entry."""

    index: int = doc("the entry's position in `jobs`, from 0", minimum=0)
    field: str | None = doc("the entry's field at fault (dotted), when one is")
    code: str = doc("the error code a single submit of this entry would get (bad_request, forbidden)")
    limit: str | None = doc("for forbidden: the token's limit at fault, as a single submit's details.limit")
    message: str


@attrs.frozen(kw_only=True)
class BatchSubmitted:
    jobs: list[Job] = doc("the jobs queued, in the order of the body's entries")
