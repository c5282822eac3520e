"""Every tool, in one list (the families' tables), checked against the policy table."""

from __future__ import annotations

from gpuplaned.mcp import queue_tools, read_tools, semantic_tools, sweep_tools, wake, write_tools
from gpuplaned.mcp.policy import POLICY, PolicyGap, validate_coverage
from gpuplaned.mcp.table import Tool

TOOLS: list[Tool] = [*read_tools.TOOLS, *write_tools.TOOLS, *queue_tools.TOOLS, *sweep_tools.TOOLS,
                     *semantic_tools.TOOLS, *wake.TOOLS]
BY_NAME = {tool.name: tool for tool in TOOLS}
RAW_ARGS = write_tools.RAW_ARGS


def check() -> None:
    if len(BY_NAME) != len(TOOLS):
        raise ValueError("two MCP tools share a name")
    validate_coverage(BY_NAME)
    unnamed = sorted(t.name for t in TOOLS if POLICY[t.name].destructive and not t.by_hand)
    if unnamed:  # a person who cannot be asked must be told what to type instead
        raise PolicyGap(f"destructive MCP tools without by_hand: {unnamed}")
