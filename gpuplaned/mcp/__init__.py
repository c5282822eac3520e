"""The MCP server: the daemon's tools, resources and prompts for AI agents (seed 000 §11.2, §11.3).

``server.build_server(shared)`` makes the low-level ``mcp.server.Server`` from one table of
tools (``tools.TOOLS``); ``asgi.McpMount`` serves it at ``/mcp`` beside the Quart app on the
HTTP front (bearer token) and on the control socket (trusted). Every tool calls the service
layer, never the store. Only the daemon imports this package (``mcp`` is slow to import).
"""
