"""``import-run``: reading a finished run's folder, and making it a run."""
