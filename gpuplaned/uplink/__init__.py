"""The agent's uplink to its server, node side (no trio, no store): ``spool``, the durable record log."""
