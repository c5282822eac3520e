-- Why a job failed, in words (issue 13): failure_reason stays a short code (EXIT_CODE, OOM,
-- SPAWN_FAILED, SHIM_DIED...); failure_message says what happened, e.g. the launcher's
-- "argv[0] '/nonexistent/prog' not found: [Errno 2] No such file or directory".
ALTER TABLE jobs ADD COLUMN failure_message TEXT;
