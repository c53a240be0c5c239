"""What only the plain-TCP plane has: its framing's handshake and what a stranger can hold before
it (the gRPC plane's counterpart at the end), and the Unix-domain socket beside its TCP port for
followers on the same host. Its shared promises are tested with the other
planes' in ``test_transport_planes.py``. Real servers and clients on this host (no Ray)."""

from __future__ import annotations

import asyncio
import os
import socket
import stat
from pathlib import Path

import grpc
import grpc.aio
import pytest
from kit.transport import FAST, Plane, message, port_of, publish_range, published, run, take

from raydex.actors.transport import (
    BLOCKS_METHOD,
    BlockHub,
    PreAuth,
    TcpBlockSource,
    TcpDataPlaneServer,
    TcpTxChannel,
    new_secret,
    target_of,
    tx_channel,
)
from raydex.actors.transport.tcp_plane import BLOCKS, HELLO, is_local_host, unix_path_for

SECRET = new_secret()


async def echo(frame: bytes) -> bytes:
    return frame


def test_a_connection_that_does_not_open_with_hello_is_closed_unread() -> None:
    async def scenario() -> None:
        async with Plane("tcp", "").serving(published(5), echo, secret=SECRET) as server:
            reader, writer = await asyncio.open_connection("127.0.0.1", port_of(server))
            writer.write(message(BLOCKS, (1).to_bytes(8, "little") + b"stranger"))
            assert await reader.read() == b""  # no HELLO: closed, not even REFUSED
            writer.close()
            assert server.refused == 0

    run(scenario())


def test_the_unix_socket_is_private_to_its_user_and_gone_after_stop(tmp_path: Path) -> None:
    async def scenario() -> str:
        async with Plane("unix", str(tmp_path)).serving(BlockHub(), echo) as server:
            path = server.unix_path
            assert path is not None and path == unix_path_for(port_of(server), str(tmp_path))
            assert stat.S_ISSOCK(os.stat(path).st_mode)
            assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
            return path

    assert not os.path.exists(run(scenario()))


def test_without_the_socket_or_on_another_host_the_follower_uses_tcp(tmp_path: Path) -> None:
    """A path that does not exist (the sequencer moved) falls back to TCP; a host that is not
    this machine's never tries the local path."""
    assert is_local_host("127.0.0.1")
    assert not is_local_host("203.0.113.7")  # TEST-NET-3: never an address of this machine

    async def scenario() -> None:
        async with Plane("tcp", "").serving(BlockHub(), echo) as server:
            assert server.unix_path is None  # no unix_dir: TCP only
            gone = str(tmp_path / "gone.sock")
            channel = tx_channel(target_of("tcp", "127.0.0.1", port_of(server), gone))
            assert isinstance(channel, TcpTxChannel)
            assert await channel.submit(b"x") == b"x"
            assert not channel.local
            await channel.close()

    run(scenario())


def test_a_socket_file_left_by_a_dead_server_is_replaced(tmp_path: Path) -> None:
    async def scenario() -> None:
        hub = BlockHub()
        probe = TcpDataPlaneServer(hub)
        port = await probe.start()
        await probe.stop()
        stale = unix_path_for(port, str(tmp_path))
        dead = socket.socket(socket.AF_UNIX)
        dead.bind(stale)  # bound, never listening, then abandoned: what a kill -9 leaves
        dead.close()
        async with Plane("unix", str(tmp_path)).serving(hub, port=port) as server:
            assert server.unix_path == stale
            source = TcpBlockSource(server.address, backoff=FAST, unix_path=stale)
            stream = source.subscribe(1)
            publish_range(hub, 1, 2)
            assert len(await take(stream, 2)) == 2 and source.local
            await stream.aclose()  # type: ignore[attr-defined]

    run(scenario())


def test_the_follower_says_whether_its_stream_reaches_the_publisher() -> None:
    """A replica's status reports its link (``raydex status``: 'no sequencer'): down before the
    first connect, up once connected, down again with the cause when the publisher goes away."""

    async def scenario() -> tuple[dict[str, object], dict[str, object], dict[str, object]]:
        plane = Plane("tcp", "")
        async with plane.serving(published(3), echo, secret=SECRET) as server:
            source = plane.source(server, secret=SECRET, backoff=FAST)
            before = source.link.status()
            stream = source.subscribe(1)
            await take(stream, 3)
            during = source.link.status()
            reading = asyncio.ensure_future(take(stream, 1))
        # the server stopped: the stream breaks and every reconnect is refused
        for _ in range(200):
            if not source.link.up:
                break
            await asyncio.sleep(0.01)
        after = source.link.status()
        reading.cancel()
        await asyncio.gather(reading, return_exceptions=True)
        await source.close()
        return before, during, after

    before, during, after = run(scenario())
    assert before["reachable"] is False and before["cause"] == "not connected yet"
    assert during["reachable"] is True and during["cause"] == ""
    assert after["reachable"] is False and after["cause"]


# -- before the secret: what a stranger can hold ---------------------------------------------


@pytest.mark.parametrize("via", ["tcp", "unix"])
def test_a_stranger_gets_a_bounded_hello_a_deadline_and_a_capped_number_of_connections(
    via: str, tmp_path: Path
) -> None:
    """A HELLO whose length field says more than ``MAX_HELLO`` is closed unread; a HELLO that
    stalls (or never starts) is closed at the deadline; connections waiting for their HELLO are
    capped per peer (the Unix socket is one peer) and in all; each refusal is counted by reason;
    a member with the secret is served throughout, and every count returns to zero."""
    plane = Plane(via, str(tmp_path))

    async def scenario() -> None:
        preauth = PreAuth(hello_timeout_s=0.3, max_per_peer=3, max_total=5)
        async with plane.serving(published(3), echo, secret=SECRET, preauth=preauth) as server:
            # a HELLO announcing 8 MiB: closed after the 5-byte header, the rest never read
            r, w = await plane._connect(server)
            w.write((8 << 20).to_bytes(4, "little") + bytes([HELLO]) + b"x" * 65536)
            assert await asyncio.wait_for(r.read(), 5) == b""
            w.close()
            # three silent connections fill this peer's share; a fourth is closed at once
            silent = [await plane._connect(server) for _ in range(3)]
            await asyncio.sleep(0.05)
            r4, w4 = await plane._connect(server)
            assert await asyncio.wait_for(r4.read(), 5) == b""
            w4.close()
            assert preauth.open == 3 and preauth.refused["per_peer"] == 1
            # a half-sent HELLO, then nothing: closed at the deadline, like the silent ones
            for r, w in silent:
                assert await asyncio.wait_for(r.read(), 5) == b""
                w.close()
            r, w = await plane._connect(server)
            w.write(message(HELLO, SECRET.encode())[:10])
            assert await asyncio.wait_for(r.read(), 5) == b""
            w.close()
            assert preauth.refused["hello_timeout"] == 4
            # a wrong secret is refused (REFUSED, then the close), a member is served
            assert await plane.raw_blocks(server, new_secret()) is None
            assert await plane.raw_blocks(server, SECRET) == 1
            assert dict(preauth.refused) == {
                "bad_secret": 1, "hello_timeout": 4, "hello_too_large": 1, "not_hello": 0,
                "per_peer": 1, "total": 0,
            }  # fmt: skip
            await asyncio.sleep(0.05)
            assert preauth.open == 0 and not preauth.per_peer

    run(scenario())


def test_the_global_cap_counts_every_peer_waiting_for_its_hello() -> None:
    async def scenario() -> None:
        preauth = PreAuth(hello_timeout_s=5.0, max_per_peer=100, max_total=4)
        async with Plane("tcp", "").serving(
            published(3), echo, secret=SECRET, preauth=preauth
        ) as s:
            held = [await asyncio.open_connection("127.0.0.1", port_of(s)) for _ in range(4)]
            await asyncio.sleep(0.05)
            r, w = await asyncio.open_connection("127.0.0.1", port_of(s))
            assert await asyncio.wait_for(r.read(), 5) == b""
            w.close()
            assert preauth.refused["total"] == 1 and preauth.open == 4
            for _, w in held:
                w.close()

    run(scenario())


def test_grpc_refuses_a_strangers_call_before_reading_its_request() -> None:
    """A call without the secret ends UNAUTHENTICATED on its metadata: a 6 MiB request is never
    handed to the server (its handler never runs), and the refusal is counted."""
    handled: list[bytes] = []

    async def handler(frame: bytes) -> bytes:
        handled.append(frame)
        return frame

    async def scenario() -> None:
        async with Plane("grpc", "").serving(published(3), handler, secret=SECRET) as server:
            async with grpc.aio.insecure_channel(server.address) as ch:
                call = ch.unary_stream(BLOCKS_METHOD)(b"\0" * (6 << 20))
                with pytest.raises(grpc.aio.AioRpcError) as err:
                    await anext(aiter(call))
                assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
            assert server.refused == 1 and server.preauth.refused["bad_secret"] == 1
        assert handled == []

    run(scenario())
