// The named sets of job states, as gpuplaned/protocol/job_states.py defines them: the daemon's
// vocabulary, written once for the UI. tests/protocol/test_web_job_states.py fails when a set
// here differs from the daemon's, so change them there first.
//
// LOST has not ended: its node fell silent, the job may run on there and keeps its GPUs, and
// the same attempt is picked up again when the node is back. It can be cancelled and retried.

import type { JobState } from "../api/types";

const states = (...names: JobState[]): ReadonlySet<JobState> => new Set(names);

/** The attempt's end is recorded: nothing changes it but a retry. */
export const ENDED = states("SUCCEEDED", "FAILED", "CANCELLED");
/** Not ended: it waits, runs, or its node is to say how it is. */
export const OPEN = states("CREATED", "QUEUED", "DISPATCHING", "RUNNING", "LOST");
/** It waits for a node: not dispatched yet. */
export const WAITING = states("CREATED", "QUEUED");
/** Its node runs it, or is about to. */
export const ACTIVE = states("DISPATCHING", "RUNNING");
/** It holds GPUs on a node. */
export const ON_NODE = states("DISPATCHING", "RUNNING", "LOST");
/** A cancel takes it (a LOST job's when its node is back). */
export const CANCELLABLE = states("QUEUED", "DISPATCHING", "RUNNING", "LOST");
/** A retry takes it. */
export const RETRYABLE = states("SUCCEEDED", "FAILED", "CANCELLED", "LOST");
/** It went wrong: the Jobs page's "failed" tab. */
export const WENT_WRONG = states("FAILED", "LOST");
