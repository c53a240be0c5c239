"""The load generator's raw HTTP/1.1 and WebSocket clients against a real aiohttp server on
127.0.0.1: pipelined answers in order, lost connections, refused answers, the WebSocket handshake,
masking (every length class), pings, fragments and closes."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Awaitable
from contextlib import asynccontextmanager
from typing import TypeVar

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from raydex.observability.loadtest.rawclient import (
    Answer,
    HttpConnection,
    ProtocolError,
    WsConnection,
)

T = TypeVar("T")
HOST = "127.0.0.1"


def run(coro: Awaitable[T]) -> T:
    async def bounded() -> T:
        return await asyncio.wait_for(coro, 30)

    return asyncio.run(bounded())


@asynccontextmanager
async def serve(*routes: web.RouteDef) -> AsyncIterator[int]:
    app = web.Application()
    app.add_routes(list(routes))
    server = TestServer(app, host=HOST, port=0)
    await server.start_server()
    try:
        yield server.port or 0
    finally:
        await server.close()


async def echo_form(request: web.Request) -> web.Response:
    body = await request.read()
    delay = float(request.query.get("sleep", "0"))
    if delay:
        await asyncio.sleep(delay)
    extra = request.headers.get("X-Trace", "")
    retry = request.query.get("retry")
    return web.Response(body=request.path.encode() + b"|" + body + b"|" + extra.encode(),
                        status=int(request.query.get("status", "200")),
                        headers={"Retry-After": retry} if retry else None)  # fmt: skip


async def query(request: web.Request) -> web.Response:
    return web.json_response(dict(request.query))


async def chunked(request: web.Request) -> web.StreamResponse:
    resp = web.StreamResponse()
    resp.enable_chunked_encoding()
    await resp.prepare(request)
    await resp.write(b"part")
    await resp.write_eof()
    return resp


async def hang_up(request: web.Request) -> web.Response:
    assert request.transport is not None
    request.transport.close()
    await asyncio.sleep(0.1)
    return web.Response(text="never seen")


def test_pipelined_requests_are_answered_in_order_with_their_own_bodies() -> None:
    async def main() -> list[tuple[int, bytes]]:
        async with serve(web.post("/api/v1/{name}", echo_form)) as port:
            c = await HttpConnection.open(HOST, port)
            # the first one is slow: the later ones are written before it is answered, and the
            # server answers in request order
            futs = [c.post("/api/v1/a?sleep=0.05", b"x=1"), c.post("/api/v1/b", b"y=2"),
                    c.post("/api/v1/c?status=429", b"", headers={"X-Trace": "t1"})]  # fmt: skip
            got = list(await asyncio.gather(*futs))
            c.close()
            return got

    assert run(main()) == [(200, b"/api/v1/a|x=1|"), (200, b"/api/v1/b|y=2|"),
                           (429, b"/api/v1/c||t1")]  # fmt: skip


def test_an_answer_says_whether_a_refusal_carried_retry_after_in_request_order() -> None:
    async def main() -> list[object]:
        async with serve(web.post("/api/v1/{name}", echo_form)) as port:
            c = await HttpConnection.open(HOST, port)
            futs = [c.post_answer("/api/v1/a?status=429&retry=1", b"x=1"),
                    c.post("/api/v1/b", b"y=2"),  # the plain form, pipelined between them
                    c.post_answer("/api/v1/c?status=429", b""),
                    c.post_answer("/api/v1/d", b"z=3")]  # fmt: skip
            got = list(await asyncio.gather(*futs))
            c.close()
            return got

    assert run(main()) == [
        Answer(429, b"/api/v1/a|x=1|", b"1"),
        (200, b"/api/v1/b|y=2|"),
        Answer(429, b"/api/v1/c||", None),
        Answer(200, b"/api/v1/d|z=3|", None),
    ]


def test_an_answer_owed_past_its_timeout_fails_and_the_late_answer_is_dropped_in_order() -> None:
    async def main() -> tuple[BaseException | None, tuple[int, bytes], BaseException | None]:
        async with serve(web.post("/api/v1/{name}", echo_form)) as port:
            c = await HttpConnection.open(HOST, port, answer_timeout_s=1.0)
            slow = await await_exc(c.post("/api/v1/a?sleep=1.5", b"x=1"))
            # the slow answer (due 0.5 s from now) must not be taken for this one's
            got = await c.post("/api/v1/b", b"y=2")
            c.close()
            return slow, got, c.lost

    slow, got, lost = run(main())
    assert isinstance(slow, TimeoutError) and "1 s" in str(slow)
    assert got == (200, b"/api/v1/b|y=2|") and lost is None


def test_a_get_carries_its_query() -> None:
    async def main() -> tuple[int, bytes]:
        async with serve(web.get("/api/v1/nextNonce", query)) as port:
            c = await HttpConnection.open(HOST, port)
            got = await c.get("/api/v1/nextNonce?account_index=7&api_key_index=0")
            c.close()
            return got

    status, body = run(main())
    assert status == 200 and body == b'{"account_index": "7", "api_key_index": "0"}'


def test_a_connection_the_server_closes_fails_what_it_still_owes_and_refuses_more() -> None:
    async def main() -> tuple[
        list[BaseException | None], BaseException | None, BaseException | None
    ]:
        async with serve(web.post("/bye", hang_up), web.post("/ok", echo_form)) as port:
            c = await HttpConnection.open(HOST, port)
            owed = [await_exc(c.post("/bye", b"")), await_exc(c.post("/ok", b"z"))]
            got = list(await asyncio.gather(*owed))
            return got, c.lost, await await_exc(c.post("/ok", b"z"))

    got, lost, later = run(main())
    assert all(isinstance(g, ConnectionError) for g in got)
    assert lost is not None and isinstance(later, ConnectionError)


async def await_exc(fut: Awaitable[object]) -> BaseException | None:
    try:
        await fut
    except BaseException as exc:
        return exc
    return None


def test_an_answer_without_content_length_is_refused_as_a_protocol_error() -> None:
    async def main() -> tuple[BaseException | None, BaseException | None]:
        async with serve(web.get("/chunked", chunked)) as port:
            c = await HttpConnection.open(HOST, port)
            exc = await await_exc(c.get("/chunked"))
            return exc, c.lost

    exc, lost = run(main())
    assert isinstance(exc, ConnectionError) and "Content-Length" in str(exc)
    assert isinstance(lost, ProtocolError)


async def ws_echo(request: web.Request) -> web.WebSocketResponse:
    ws = web.WebSocketResponse(autoping=False)
    await ws.prepare(request)
    await ws.send_str('{"type": "connected"}')
    async for msg in ws:
        if msg.type == aiohttp.WSMsgType.TEXT:
            if msg.data == "ping me":
                await ws.ping(b"p1")
            elif msg.data == "close me":
                await ws.close()
            else:
                await ws.send_str(msg.data)
        elif msg.type == aiohttp.WSMsgType.PONG:
            await ws.send_str("pong:" + msg.data.decode())
    return ws


def test_websocket_messages_of_every_length_class_round_trip_through_the_mask() -> None:
    sizes = [0, 1, 125, 126, 127, 65535, 65536, 200_000]

    async def main() -> tuple[list[bytes], list[bytes]]:
        got: list[bytes] = []
        done = asyncio.Event()

        def on_message(data: bytes) -> None:
            got.append(data)
            if len(got) == len(sizes) + 1:
                done.set()

        async with serve(web.get("/stream", ws_echo)) as port:
            ws = await WsConnection.open(HOST, port, "/stream", on_message)
            texts = [os.urandom(n).hex()[:n].encode() for n in sizes]  # ASCII: valid UTF-8
            for t in texts:
                ws.send_text(t)
            await done.wait()
            ws.close()
            assert got[0] == b'{"type": "connected"}'
            return texts, got[1:]

    sent, out = run(main())
    assert out == sent  # byte for byte: the server unmasked what the client masked


def test_a_ping_is_answered_and_a_close_from_the_server_ends_the_connection() -> None:
    async def main() -> tuple[list[bytes], BaseException | None, bool]:
        got: list[bytes] = []
        async with serve(web.get("/stream", ws_echo)) as port:
            ws = await WsConnection.open(HOST, port, "/stream", got.append)
            ws.send_text(b"ping me")
            while b"pong:p1" not in got:
                await asyncio.sleep(0.01)
            ws.send_text(b"close me")
            why = await asyncio.wait_for(ws.closed, 5)
            return got, why, ws.is_open

    got, why, is_open = run(main())
    assert got == [b'{"type": "connected"}', b"pong:p1"]
    assert why is None and not is_open


def test_a_server_that_does_not_upgrade_is_refused_at_open() -> None:
    async def main() -> BaseException | None:
        async with serve(web.get("/stream", query)) as port:
            return await await_exc(WsConnection.open(HOST, port, "/stream", lambda _d: None))

    exc = run(main())
    assert isinstance(exc, ProtocolError) and "no WebSocket upgrade" in str(exc)


@pytest.mark.parametrize("n", [1, 3])
def test_send_after_the_connection_is_gone_is_dropped_not_raised(n: int) -> None:
    async def main() -> bool:
        async with serve(web.get("/stream", ws_echo)) as port:
            ws = await WsConnection.open(HOST, port, "/stream", lambda _d: None)
            ws.close()
            for _ in range(n):
                ws.send_text(b"late")
            await asyncio.wait_for(ws.closed, 5)
            return ws.is_open

    assert run(main()) is False


def test_a_fragmented_message_is_delivered_whole_and_frames_split_across_reads_wait() -> None:
    async def main() -> list[bytes]:
        got: list[bytes] = []
        ws = WsConnection(HOST, 1, "/stream", got.append)
        ws._open = True  # past the handshake: frames fed straight to the parser
        wire = b"\x01\x02ab" + b"\x00\x01c" + b"\x80\x02de" + b"\x81\x7e\x00\x7e" + b"x" * 126
        for i in range(0, len(wire), 3):  # three bytes per read: every header split somewhere
            ws.data_received(wire[i : i + 3])
        return got

    assert run(main()) == [b"abcde", b"x" * 126]


def test_a_masked_frame_from_the_server_is_a_protocol_error() -> None:
    async def main() -> BaseException | None:
        ws = WsConnection(HOST, 1, "/stream", lambda _d: None)
        ws._open = True  # past the handshake: frames fed straight to the parser
        ws.data_received(b"\x81\x81" + b"\0\0\0\0" + b"a")
        assert ws.ready.exception() is ws.closed.result()
        return ws.closed.result()

    assert isinstance(run(main()), ProtocolError)
