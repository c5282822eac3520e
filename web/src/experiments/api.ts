// The workspace's calls: the runs of a selection in one request, and the views (short links
// and saved views) the server keeps.

import { request } from "../api/client";
import type { SavedView, WorkspaceQuery, WorkspaceReply } from "./types";

export const workspaceApi = {
  runs: (body: WorkspaceQuery, signal?: AbortSignal) =>
    request<WorkspaceReply>("/workspace/runs", { method: "POST", body, signal }),
  createView: (body: { state: string; name?: string; page: string }) =>
    request<{ view: SavedView }>("/views", { method: "POST", body }).then((r) => r.view),
  getView: (id: string, signal?: AbortSignal) =>
    request<{ view: SavedView }>(`/views/${encodeURIComponent(id)}`, { signal }).then((r) => r.view),
  savedViews: (signal?: AbortSignal) =>
    request<{ views: SavedView[] }>("/views", { query: { saved: true }, signal }).then((r) => r.views),
  deleteView: (id: string) => request<unknown>(`/views/${encodeURIComponent(id)}`, { method: "DELETE" }),
};
