// The workspace's calls (api/client.ts), with the reply's configs narrowed to JSON values.

import { api } from "../api/client";
import type { WorkspaceQuery, WorkspaceReply } from "./types";

export const workspaceApi = {
  runs: (body: WorkspaceQuery, signal?: AbortSignal) => api.workspaceRuns(body, signal) as Promise<WorkspaceReply>,
  createView: api.createView,
  getView: api.getView,
  savedViews: (signal?: AbortSignal) => api.listViews({ saved: true, page: "experiments" }, signal),
  deleteView: api.deleteView,
};
