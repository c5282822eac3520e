"""The API's operations: what REST routes, MCP tools and the CLI call (jobs, runs, sessions,
logs, events, projects, tokens, webhooks, checkpoints, imports, diagnosis, the audit log), and
the admission of their callers (``budgets``, ``confined_callers``)."""
