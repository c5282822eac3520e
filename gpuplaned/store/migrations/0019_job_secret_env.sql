-- A job's secret env (job submit --secret-env, a job file's [secrets]): its names in the clear
-- (a job view lists them), its values only sealed (gpuplaned.service.sealing) under the key kept
-- beside, not in, this database. NULL: the job has none.
ALTER TABLE jobs ADD COLUMN secret_env_names TEXT;
ALTER TABLE jobs ADD COLUMN secret_env_sealed TEXT;
