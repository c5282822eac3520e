"""Server-Sent Events: framing, Last-Event-ID, heartbeats in virtual time, a real Quart-Trio stream."""

from __future__ import annotations

import pytest
import trio
import trio.testing
from quart import make_response, request
from quart_trio import QuartTrio
from werkzeug.datastructures import Headers

from gpuplaned.http.sse import HEARTBEAT, SSE_HEADERS, format_event, parse_last_event_id, sse_stream
from gpuplaned.runtime.broadcast import Broadcast, Lagged


def test_format_event_fields_and_multiline_data():
    assert format_event("hello") == b"data: hello\n\n"
    assert format_event("x", id="42", event="log") == b"id: 42\nevent: log\ndata: x\n\n"
    assert format_event("a\nb\r\nc\rd") == b"data: a\ndata: b\ndata: c\ndata: d\n\n"
    assert format_event("") == b"data: \n\n"
    assert format_event(" indented: ünïcode") == " data:  indented: ünïcode\n\n".encode()[1:]
    for bad in ({"id": "1\n2"}, {"id": "a\0"}, {"event": "x\ry"}):
        with pytest.raises(ValueError):
            format_event("d", **bad)


def test_parse_last_event_id():
    assert parse_last_event_id(Headers({"Last-Event-ID": " 1234 "})) == "1234"
    assert parse_last_event_id({"last-event-id": "99"}) == "99"
    assert parse_last_event_id({"Accept": "text/event-stream"}) is None
    for bad in ("", "   ", "x" * 257, "a\0b"):
        assert parse_last_event_id({"Last-Event-ID": bad}) is None


async def test_heartbeat_only_after_silence(autojump_clock):
    send, receive = trio.open_memory_channel[bytes](0)
    seen: list[tuple[float, bytes]] = []

    async def producer() -> None:
        async with send:
            await trio.sleep(1)
            await send.send(b"one")
            await trio.sleep(39)  # t = 40
            await send.send(b"two")
            await trio.sleep(5)  # t = 45
            await send.send(b"three")
            await trio.sleep(20)  # t = 65, one heartbeat at 60 before the end

    start = trio.current_time()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(producer)
        async for chunk in sse_stream(receive, heartbeat_s=15):
            seen.append((trio.current_time() - start, chunk))
    assert seen == [
        (1, b"one"),
        (16, HEARTBEAT),
        (31, HEARTBEAT),
        (40, b"two"),
        (45, b"three"),
        (60, HEARTBEAT),
    ]


async def test_heartbeat_counts_from_when_the_consumer_sent(autojump_clock):
    send, receive = trio.open_memory_channel[bytes](10)
    send.send_nowait(b"a")
    stream = sse_stream(receive, heartbeat_s=10)
    times = []
    async for chunk in stream:
        times.append((trio.current_time(), chunk))
        await trio.sleep(7)  # a slow client: sending took 7 s
        if len(times) == 3:
            break
    await stream.aclose()
    assert times == [(0, b"a"), (17, HEARTBEAT), (34, HEARTBEAT)]


async def test_encode_and_lagged_from_a_subscription(autojump_clock):
    bc: Broadcast[str] = Broadcast()

    def encode(item: str | Lagged) -> bytes:
        if isinstance(item, Lagged):
            return format_event(str(item.skipped), event="lagged")
        return format_event(item)

    async with bc.subscribe(maxlen=2) as sub:
        for word in ("a", "b", "c", "d"):
            bc.publish(word)
        bc.close()
        chunks = [chunk async for chunk in sse_stream(sub, encode=encode)]
    assert chunks == [b"event: lagged\ndata: 2\n\n", b"data: c\n\n", b"data: d\n\n"]


async def test_async_generator_sources_are_refused():
    async def gen():
        yield b"x"

    source = gen()
    with pytest.raises(TypeError, match="cancel-safe"):
        await sse_stream(source).__anext__()
    await source.aclose()


async def test_cancelling_the_consumer_leaves_nothing_behind(autojump_clock):
    bc: Broadcast[str] = Broadcast()

    async def client() -> None:
        async with bc.subscribe() as sub:
            async for _ in sse_stream(sub, heartbeat_s=1, encode=format_event):
                pass

    async with trio.open_nursery() as nursery:
        nursery.start_soon(client)
        await trio.sleep(10.5)
        assert bc.statistics().subscribers == 1
        nursery.cancel_scope.cancel()
    assert bc.statistics().subscribers == 0


def make_app(bc: Broadcast[tuple[int, str]], heartbeat_s: float) -> QuartTrio:
    app = QuartTrio(__name__)

    @app.get("/logs")
    async def logs():
        last = parse_last_event_id(request.headers)

        def encode(item: tuple[int, str] | Lagged) -> bytes:
            if isinstance(item, Lagged):
                return format_event(str(item.skipped), event="lagged")
            offset, line = item
            return format_event(line, id=str(offset), event="line")

        async def body():
            yield format_event(f"resuming after {last}", event="hello")
            async with bc.subscribe() as sub:
                async for chunk in sse_stream(sub, heartbeat_s=heartbeat_s, encode=encode):
                    yield chunk

        response = await make_response(body(), 200, dict(SSE_HEADERS))
        response.timeout = None
        return response

    return app


async def wait_for_subscribers(bc: Broadcast, n: int) -> None:
    while bc.statistics().subscribers != n:
        await trio.sleep(0.001)


async def test_quart_trio_stream_with_ids_and_heartbeat(autojump_clock):
    bc: Broadcast[tuple[int, str]] = Broadcast()
    app = make_app(bc, heartbeat_s=15)
    client = app.test_client()
    with trio.fail_after(60):
        async with client.request("/logs", headers={"Last-Event-ID": "17"}) as conn:
            await conn.send_complete()
            assert await conn.receive() == b"event: hello\ndata: resuming after 17\n\n"
            await wait_for_subscribers(bc, 1)
            assert conn.status_code == 200
            assert conn.headers["Content-Type"] == "text/event-stream"
            assert conn.headers["Cache-Control"] == "no-cache"
            assert conn.headers["X-Accel-Buffering"] == "no"
            start = trio.current_time()
            for offset, line in [(18, "epoch 1"), (26, "epoch 2\r"), (35, "done")]:
                bc.publish((offset, line))
            assert await conn.receive() == b"id: 18\nevent: line\ndata: epoch 1\n\n"
            assert await conn.receive() == b"id: 26\nevent: line\ndata: epoch 2\ndata: \n\n"
            assert await conn.receive() == b"id: 35\nevent: line\ndata: done\n\n"
            assert await conn.receive() == HEARTBEAT
            assert trio.current_time() - start == pytest.approx(15)
            # The test client cannot end a streaming response by disconnecting (its
            # channel is never closed), so the server side ends it; the real-socket test
            # below covers a client that goes away.
            bc.close()
        assert conn.response_data == b""
    assert bc.statistics().subscribers == 0


async def test_hypercorn_over_a_real_socket_and_a_client_that_goes_away():
    from hypercorn.config import Config
    from hypercorn.trio import serve

    bc: Broadcast[tuple[int, str]] = Broadcast()
    app = make_app(bc, heartbeat_s=0.05)
    config = Config()
    config.bind = ["127.0.0.1:0"]
    config.accesslog = None
    config.errorlog = None
    shutdown = trio.Event()

    async def run_server(task_status=trio.TASK_STATUS_IGNORED) -> None:
        await serve(app, config, shutdown_trigger=shutdown.wait, task_status=task_status)

    async def read_until(stream: trio.SocketStream, buf: bytes, marker: bytes, count: int = 1) -> bytes:
        while buf.count(marker) < count:
            data = await stream.receive_some()
            assert data, "server closed the connection"
            buf += data
        return buf

    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            binds = await nursery.start(run_server)
            host, port = binds[0].removeprefix("http://").rsplit(":", 1)
            stream = await trio.open_tcp_stream(host, int(port))
            await stream.send_all(
                b"GET /logs HTTP/1.1\r\nHost: test\r\nAccept: text/event-stream\r\n"
                b"Last-Event-ID: 5\r\n\r\n"
            )
            buf = await read_until(stream, b"", b"resuming after 5")
            head = buf.split(b"\r\n\r\n", 1)[0].lower()
            assert head.startswith(b"http/1.1 200")
            assert b"content-type: text/event-stream" in head
            assert b"cache-control: no-cache" in head
            assert b"x-accel-buffering: no" in head
            await wait_for_subscribers(bc, 1)
            for i in range(3):
                bc.publish((i, f"line {i}"))
            buf = await read_until(stream, buf, b"event: line", 3)
            buf = await read_until(stream, buf, HEARTBEAT, 1)
            for i in range(3):
                assert format_event(f"line {i}", id=str(i), event="line") in buf
            await stream.aclose()  # the browser tab is closed
            await wait_for_subscribers(bc, 0)  # so is the stream, and its subscription
            shutdown.set()
