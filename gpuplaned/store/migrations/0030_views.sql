-- Issue 33 item 1: the Experiments workspace's short links and saved views. A view is a page's
-- URL state (its query string) kept under a short random id (/v/<id>); a named one is a saved
-- view. gpuplaned.store.view_rows holds the SQL.
CREATE TABLE views (
  id         TEXT PRIMARY KEY,   -- url-safe random, never a sequence
  page       TEXT NOT NULL,      -- the UI page the state is for: experiments
  state      TEXT NOT NULL,      -- the query string, without "?"
  state_hash TEXT NOT NULL,      -- sha256 of page, name and state: the same posted again finds its id
  name       TEXT,               -- NULL: a short link; else a saved view
  token_id   TEXT,               -- whose it is (a token's id, a browser session's key); NULL: the owner
  created_at INTEGER NOT NULL
);
CREATE UNIQUE INDEX idx_views_state ON views(state_hash);
CREATE INDEX idx_views_saved ON views(created_at DESC, id DESC) WHERE name IS NOT NULL;
CREATE INDEX idx_views_owner ON views(token_id) WHERE token_id IS NOT NULL;  -- a caller's count, for its cap
