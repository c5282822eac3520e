"""SQLite storage: schema migrations, the writer's batch commit, read connections.

Only the ``store`` actor writes; everything here is synchronous and runs on worker threads.
"""
