"""An httpx2 client for the tests' MCP clients that closes each response body's generators.

The leak is on the client side, in our tests' dependencies, not in gpuplaned: the ``mcp`` SDK's
streamable-HTTP client stops reading an SSE response once it has its answer (it calls
``response.aclose()`` and returns, leaving the body's iterators suspended), and httpx2's
``AsyncResponseStream.__aiter__`` iterates httpcore2's body generator without ever closing it.
From httpx2/httpcore2 2.17.0, ``aiter_bytes`` closes its stream in a ``finally``, so that
abandoned httpcore2 generator is dropped inside the test's trio run, which reports it as a
ResourceWarning (an error under ``filterwarnings = error``). The connection itself was closed;
only the generator was left to the garbage collector.

Here each body is read through an iterator that is not a generator and that closes httpcore2's
generator when the response closes, so nothing is left for the collector, on 2.16 and 2.17 alike.
"""
from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from httpx2._transports.default import map_httpcore_exceptions  # the same error mapping httpx2 applies


class ClosingBody(httpx2.AsyncByteStream):
    """A response body whose ``aclose`` also closes the generator reading httpcore2's body."""

    def __init__(self, body: Any) -> None:
        self._body = body
        self._chunks: AsyncIterator[bytes] | None = None

    def __aiter__(self) -> ClosingBody:
        return self

    async def __anext__(self) -> bytes:
        if self._chunks is None:
            # httpx2's own stream wraps httpcore2's; read the inner one so that we hold its generator.
            self._chunks = self._body._httpcore_stream.__aiter__()
        with map_httpcore_exceptions():
            return await self._chunks.__anext__()

    async def aclose(self) -> None:
        try:
            if self._chunks is not None and hasattr(self._chunks, "aclose"):
                await self._chunks.aclose()
        finally:
            await self._body.aclose()


class ClosingTransport(httpx2.AsyncHTTPTransport):
    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        response = await super().handle_async_request(request)
        response.stream = ClosingBody(response.stream)
        return response


def closing_client(**options: Any) -> httpx2.AsyncClient:
    """An ``httpx2.AsyncClient`` (headers, timeout...) whose responses close their body readers."""
    return httpx2.AsyncClient(transport=ClosingTransport(), **options)


@asynccontextmanager
async def connected(url: str, secret: str, **options: Any) -> AsyncIterator[Client]:
    """A real ``mcp.Client`` on the MCP endpoint of the HTTP front at ``url``, as the token ``secret``."""
    async with closing_client(headers={"Authorization": f"Bearer {secret}"}, timeout=70) as http, \
            Client(streamable_http_client(url + "/mcp", http_client=http), **options) as client:
        yield client


def ok(result: Any) -> dict:
    """A tool call's structured answer; it must not be an error."""
    assert not result.is_error, result.content
    return result.structured_content


def error_of(result: Any) -> dict:
    """A tool call's error body; it must be one."""
    assert result.is_error, result.structured_content
    return json.loads(result.content[0].text)["error"]
