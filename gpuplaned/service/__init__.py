"""The service layer: what the HTTP handlers (and later MCP) call. No HTTP, no trio plumbing."""
