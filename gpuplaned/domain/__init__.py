"""Pure state machines and algorithms: no trio, no SQLite, no I/O."""
