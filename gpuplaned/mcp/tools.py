"""Every tool, in one list (the families' tables), checked against the policy table."""

from __future__ import annotations

from gpuplaned.mcp import read_tools, semantic_tools, wake, write_tools
from gpuplaned.mcp.policy import validate_coverage
from gpuplaned.mcp.table import Tool

TOOLS: list[Tool] = [*read_tools.TOOLS, *write_tools.TOOLS, *semantic_tools.TOOLS, *wake.TOOLS]
BY_NAME = {tool.name: tool for tool in TOOLS}
RAW_ARGS = write_tools.RAW_ARGS


def check() -> None:
    if len(BY_NAME) != len(TOOLS):
        raise ValueError("two MCP tools share a name")
    validate_coverage(BY_NAME)
