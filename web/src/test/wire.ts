// Rows of the wire types for the UI's tests, with the fields a test leaves out empty (null, {}),
// so a fixture names only what its test looks at and still has the shape the daemon sends.
import type { Checkpoint, Evaluation } from "../api/types";

export function checkpoint(c: Pick<Checkpoint, "id" | "run_id" | "step" | "path" | "size_bytes" | "created_at">
  & Partial<Checkpoint>): Checkpoint {
  return { epoch: null, metadata: {}, fingerprint: null, full_hash: null, verified_at: null, parent_id: null, deleted_at: null, ...c };
}

export function evaluation(e: Pick<Evaluation, "id" | "checkpoint_id" | "status" | "created_at"> & Partial<Evaluation>): Evaluation {
  return { checkpoint_run_id: "run_a", checkpoint_step: null, checkpoint_path: "/w/a.pt", job_id: null, run_id: null, name: null,
    suite: null, dataset: null, dataset_version: null, metrics: {}, error: null, runtime_s: null, started_at: null,
    finished_at: null, ...e };
}
