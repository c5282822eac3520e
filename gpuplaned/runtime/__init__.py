"""The actor runtime: supervision, inboxes and timing. Knows trio; knows nothing of GPUs or jobs."""
