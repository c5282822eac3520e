-- Projects and experiments over the API (issue 6): a project's runs are counted on every
-- listing and checked before it is deleted; experiments already have idx_runs_exp.
CREATE INDEX idx_runs_project ON runs(project_id, created_at DESC);
