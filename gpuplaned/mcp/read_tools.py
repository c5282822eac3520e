"""The read tools: nodes, jobs, runs, metrics, logs, events, checkpoints, evaluations. Each
calls the service function its REST route calls, and words a summary of the answer."""

from __future__ import annotations

from typing import Any

import attrs
import trio

from gpuplaned.domain.event_types import with_kinds
from gpuplaned.mcp import args as a
from gpuplaned.mcp.digests import (
    LogLineOut,
    LogTail,
    MetricsDigest,
    compile_grep,
    describe_series,
    digest_metrics,
)
from gpuplaned.mcp.table import Call, Result, Tool, next_action
from gpuplaned.mcp.tasks import describe_progress
from gpuplaned.protocol.checkpoint_replies import CheckpointList
from gpuplaned.protocol.converter import structure
from gpuplaned.protocol.evaluation_replies import Evaluation
from gpuplaned.protocol.fields import doc
from gpuplaned.protocol.job_replies import JobList, JobReply
from gpuplaned.protocol.job_states import WENT_WRONG, JobState
from gpuplaned.protocol.node_replies import NodeList, NodeReply
from gpuplaned.protocol.patterns import scan_lines
from gpuplaned.protocol.run_replies import RunSummary
from gpuplaned.service.api import evaluations, events, jobs, logs, nodes_view, run_records, runs
from gpuplaned.service.api.series_query import RunMetricsArgs
from gpuplaned.store.event_rows import EventFilter, EventRow

GREP_SCAN = 20_000  # tail_logs with grep reads at most this many lines back


def job_view(job: Any) -> Any:
    # In a list: env names only, as REST's list.
    return jobs.env_view(job, values=False)


def job_next(job: Any) -> list[Any]:
    out = []
    if job.run_id:
        out.append(next_action("get_run_summary", "step, loss, ETA of its run", run_id=job.run_id))
    if job.status in WENT_WRONG:
        out.append(next_action("explain_failure", "why it failed", job_id=job.id))
    if job.attempt:
        out.append(next_action("tail_logs", "its latest output", job_id=job.id, max_lines=50))
    if job.status == JobState.SUCCEEDED and job.run_id:
        out.append(next_action("diagnose_run", "how the run went", run_id=job.run_id))
    return out


async def list_nodes(call: Call, _: a.NoArgs) -> Result:
    found = await nodes_view.list_nodes(call.shared)
    free = sum(1 for n in found for g in n.gpus if g.owner_job_id is None)
    words = ", ".join(f"{n.name} ({n.status}, {_capacity_words(n)})" for n in found) or "none"
    return Result(f"{len(found)} node(s): {words}; {free} GPU slot(s) free.", {"nodes": found},
                  [next_action("get_node_status", "one node's readings", node=n.name) for n in found[:3]])


def _capacity_words(node: Any) -> str:
    """``2 GPUs``, or a Slurm node's ``pooled (slurm): up to 4 GPUs a job, 8 jobs at once, 3 in flight``."""
    if node.pooled is None:
        return f"{len(node.gpus)} GPUs"
    p = node.pooled
    return f"pooled ({node.runner}): up to {p.gpus_per_job} GPUs a job, {p.max_jobs} jobs at once, " \
           f"{p.jobs_in_flight} in flight"


async def get_node_status(call: Call, args: a.NodeArgs) -> Result:
    node = await nodes_view.get_node(call.shared, args.node)
    words = (f"Node {node.name} is {node.status} with {_capacity_words(node)}" if node.pooled else
             f"Node {node.name} is {node.status} with {len(node.gpus)} GPU(s) and "
             f"{node.cpu_jobs}/{node.max_cpu_jobs} CPU jobs")
    if node.condition_messages:  # what its parts say is wrong (slurm_unreachable: ...)
        words += "; it takes no new work while " + "; ".join(f"{name}: {message}"
                                                             for name, message in node.condition_messages.items())
    return Result(words + ".", {"node": node})


async def list_jobs(call: Call, args: a.ListJobsArgs) -> Result:
    page, cursor = await jobs.list_jobs(call.shared, list(args.status), args.limit, args.cursor, args.group,
                                        args.sweep)
    counts: dict[str, int] = {}
    for job in page:
        counts[job.status] = counts.get(job.status, 0) + 1
    words = ", ".join(f"{n} {s}" for s, n in counts.items()) or "none"
    more = [next_action("list_jobs", "the next page", cursor=cursor, limit=args.limit)] if cursor else []
    return Result(f"{len(page)} job(s), newest first: {words}.", {"jobs": [job_view(j) for j in page],
                                                                  "next_cursor": cursor},
                  more + [next_action("get_job", "one job", job_id=j.id) for j in page[:3]])


async def get_job(call: Call, args: a.JobArgs) -> Result:
    job = await jobs.get_job(call.shared, args.job_id)
    words = f"Job {job.id} ({job.name}) is {job.status}, attempt {job.attempt}/{job.max_attempts}"
    if job.failure_reason:
        words += f", {job.failure_reason}: {job.failure_message or ''}".rstrip(": ")
    if job.queue_reason:
        words += f"; it waits: {job.queue_reason}"
    if job.wait_reason:
        words += f"; its node has not started it yet: {job.wait_reason}"
    if job.dependencies:
        words += f"; runs after ({job.after}) " + ", ".join(f"{d.job_id} ({d.status})" for d in job.dependencies)
    if job.dependants:
        words += "; waited for by " + ", ".join(f"{d.job_id} ({d.status})" for d in job.dependants)
    # One job: REST's rule, through its code (values for a caller who may write, secret names excepted).
    return Result(words + ".", {"job": jobs.view_for(job, call.caller)}, job_next(job))


async def get_run_summary(call: Call, args: a.RunArgs) -> Result:
    await runs.get_run(call.shared, args.run_id)  # 404 for an unknown run
    summary = await runs.get_summary(call.shared, args.run_id)
    return Result(describe_progress(summary), summary,
                  [next_action("query_metrics", "the curves, decimated", run_id=args.run_id, max_points=200),
                   next_action("diagnose_run", "what the rules find", run_id=args.run_id)])


async def query_metrics(call: Call, args: a.QueryMetricsArgs) -> Result:
    wanted: dict[str, Any] = {"x": args.x, "points": args.max_points}
    if args.names:
        wanted["names"] = list(args.names)
    for key in ("start", "end"):
        if getattr(args, key) is not None:
            wanted[key] = getattr(args, key)
    answer = await runs.query_metrics(call.shared, args.run_id, structure(wanted, RunMetricsArgs, what="arguments"))
    digest = digest_metrics(answer)
    words = "; ".join(describe_series(n, s.stats) for n, s in list(digest.series.items())[:4]) or "no series"
    if len(digest.series) > 4:
        words += f"; and {len(digest.series) - 4} more series"
    return Result(f"Run {args.run_id}, {digest.buckets} bucket(s) of width {digest.width}: {words}.", digest,
                  [next_action("diagnose_run", "what the rules make of these curves", run_id=args.run_id)])


async def tail_logs(call: Call, args: a.TailLogsArgs) -> Result:
    grep = compile_grep(args.grep)
    scan = GREP_SCAN if grep is not None else args.max_lines
    page = await logs.read_lines(call.shared, args.job_id, args.stream, attempt=args.attempt, tail=scan,
                                 offset=None, limit=scan)
    lines = [(line.offset, line.line) for line in page.lines]
    # Off the event loop: RE2 is linear, but 20,000 long lines still take a while. scan_lines
    # stops at its own budgets, so an abandoned thread ends soon after its caller has gone.
    found = await trio.to_thread.run_sync(lambda: scan_lines(lines, grep, args.max_lines), abandon_on_cancel=True)
    tail = LogTail(job_id=page.job_id, attempt=page.attempt, stream=page.stream,
                   lines=[LogLineOut(offset=o, line=text) for o, text in found.found], scanned=found.scanned,
                   matched=found.matched, left_out=found.matched - len(found.found), stopped=found.stopped)
    what = f"matching {args.grep!r}" if grep is not None else ""
    words = (f"{len(found.found)} line(s) {what} of {args.stream} (attempt {page.attempt}); {found.matched} matched "
             f"in the last {found.scanned} line(s), {tail.left_out} left out by the line budget.").replace("  ", " ")
    if found.stopped is not None:
        words += (f" The search stopped at its {found.stopped} budget; the {len(lines) - found.scanned} older "
                  "line(s) read were not searched.")
    more = [next_action("tail_logs", "more of the matching lines", job_id=args.job_id, stream=args.stream,
                        max_lines=min(a.MAX_LINES, args.max_lines * 4), **({"grep": args.grep} if args.grep else {}))
            ] if tail.left_out else []
    return Result(words, tail, more + [next_action("explain_failure", "a classified cause", job_id=args.job_id)])


@attrs.frozen(kw_only=True)
class EventPage:
    events: list[EventRow] = doc("newest first")
    next_cursor: str | None = doc("older events: pass as cursor= to list_events")
    cursor: str = doc("pass to wait_for_events to be woken by what comes after the newest event here (0: none yet)")


def event_filter(args: a.EventFilterArgs) -> EventFilter:
    return EventFilter(tuple(args.severity), with_kinds(args.types), args.node_id, args.job_id, args.run_id)


async def list_events(call: Call, args: a.ListEventsArgs) -> Result:
    found = await events.list_events(call.shared, event_filter(args), args.limit, args.cursor)
    # The wake-up cursor is the newest event of all (not of this filter's): waiting after it
    # misses nothing recorded since, whatever filter the wait uses.
    newest = (await events.list_events(call.shared, EventFilter(), 1, None)).events
    cursor = newest[0].id if newest else events.FROM_THE_START
    kinds = sorted({e.type for e in found.events})
    return Result(f"{len(found.events)} event(s), newest first{': ' + ', '.join(kinds[:8]) if kinds else ''}.",
                  {"events": found.events, "next_cursor": found.next_cursor, "cursor": cursor},
                  [next_action("wait_for_events", "be woken by the next ones", cursor=cursor, timeout_s=45)])


async def list_checkpoints(call: Call, args: a.CheckpointsArgs) -> Result:
    table = await run_records.list_checkpoints(call.shared, args.run_id, args.metric)
    best = table.best_id
    words = f"{len(table.checkpoints)} checkpoint(s) of run {args.run_id}"
    words += f", best {best} by {table.metric}." if best else "."
    more = []
    if len(table.checkpoints) >= 2:
        ids = [c.id for c in table.checkpoints][-2:]
        more.append(next_action("compare_checkpoints", "the last two side by side", checkpoint_ids=ids))
    if best:
        more.append(next_action("evaluate_checkpoint", "evaluate the best", checkpoint_id=best,
                                command=["python", "eval.py", "{checkpoint}"], dry_run=True))
    return Result(words, table, more)


@attrs.frozen(kw_only=True)
class Evaluations:
    evaluations: list[Evaluation] = doc("a checkpoint's oldest first; an experiment's newest first")
    experiment_id: str | None = doc("when an experiment's were asked for")


async def list_evaluations(call: Call, args: a.EvaluationsArgs) -> Result:
    if args.checkpoint_id is not None:
        found = await evaluations.list_for_checkpoint(call.shared, args.checkpoint_id)
        data = {"evaluations": found.evaluations, "experiment_id": None}
        where = f"checkpoint {args.checkpoint_id}"
    else:
        assert args.experiment_id is not None  # the class's schema: one of the two
        found = await evaluations.list_for_experiment(call.shared, args.experiment_id, args.project, args.limit)
        data = {"evaluations": found.evaluations, "experiment_id": found.experiment_id}
        where = f"experiment {found.experiment_id}"
    return Result(f"{len(data['evaluations'])} evaluation(s) of {where}.", data)


TOOLS = [
    Tool(name="list_nodes", title="List nodes", description="Every node with its GPUs, their jobs and latest "
         "readings.", args=a.NoArgs, reply=NodeList, handler=list_nodes),
    Tool(name="get_node_status", title="Node status", description="One node (id or name): status, GPUs, jobs, "
         "latest readings.", args=a.NodeArgs, reply=NodeReply, handler=get_node_status),
    Tool(name="list_jobs", title="List jobs", description="Jobs, newest first, optionally by state and group; page with "
         "next_cursor.", args=a.ListJobsArgs, reply=JobList, handler=list_jobs),
    Tool(name="get_job", title="Get job", description="One job: state, attempt, its run, why it failed. Poll this "
         "(every 5-30 s) for a job you started.", args=a.JobArgs, reply=JobReply, handler=get_job),
    Tool(name="get_run_summary", title="Run summary", description="A run's progress (step, ETA), latest and best "
         "per metric, trends and health warnings. Cheap: poll this.", args=a.RunArgs, reply=RunSummary,
         handler=get_run_summary),
    Tool(name="query_metrics", title="Query metrics", description="A run's metric curves within a token budget: "
         "per series its statistics first (count, first/last step, min/max with their steps, last, trend), then "
         "at most max_points buckets, each its min and max.", args=a.QueryMetricsArgs, reply=MetricsDigest,
         handler=query_metrics),
    Tool(name="tail_logs", title="Tail logs", description="The last lines of a job's output within a line budget "
         "(max_lines), optionally only those a regex (grep) matches; says how many matched and were left out.",
         args=a.TailLogsArgs, reply=LogTail, handler=tail_logs),
    Tool(name="list_events", title="List events", description="Events, newest first, by type, severity, job, run "
         "or node; its cursor starts wait_for_events.", args=a.ListEventsArgs, reply=EventPage,
         handler=list_events),
    Tool(name="list_checkpoints", title="List checkpoints", description="A run's checkpoints, oldest step first, "
         "each with the ranking metric's value, the best marked.", args=a.CheckpointsArgs, reply=CheckpointList,
         handler=list_checkpoints),
    Tool(name="list_evaluations", title="List evaluations", description="A checkpoint's evaluations, or an "
         "experiment's.", args=a.EvaluationsArgs, reply=Evaluations, handler=list_evaluations),
]
