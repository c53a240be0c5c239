"""What only the plain-TCP plane has: its framing's handshake, and the Unix-domain socket beside
its TCP port for followers on the same host. Its shared promises are tested with the other
planes' in ``test_transport_planes.py``. Real servers and clients on this host (no Ray)."""

from __future__ import annotations

import asyncio
import os
import socket
import stat
from pathlib import Path

from kit.transport import FAST, Plane, message, port_of, publish_range, published, run, take

from raydex.actors.transport import (
    BlockHub,
    TcpBlockSource,
    TcpDataPlaneServer,
    TcpTxChannel,
    new_secret,
    target_of,
    tx_channel,
)
from raydex.actors.transport.tcp_plane import BLOCKS, is_local_host, unix_path_for

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
